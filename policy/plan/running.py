"""The plan for the fleet that is running: which of its pools each kind should go to, what one GPU of
each pool takes of each kind (what the assignment spills by), the best fleet of as many GPUs beside it,
and the Draft Law per kind where each puts it. Pure and seconds of CPU: the proxy copies its state into
``FleetInputs`` on its event loop, runs ``plan_fleet`` in a thread, and adopts the result
(``proxy/planner.py``, ``proxy/fleet_planning.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from draftgate.policy.calibration import Calibration
from draftgate.policy.plan import search
from draftgate.policy.plan.assignment import PoolRates
from draftgate.policy.plan.kind_law import KindLaw, law_by_kind
from draftgate.policy.plan.model import Candidate, Composition, PoolPlan, Targets, Traffic, evaluate
from draftgate.policy.plan.search import Recommendation


@dataclass(frozen=True)
class FleetInputs:
    traffic: Traffic
    calibration: Calibration
    running: tuple[tuple[Candidate, int], ...]  # each pool as it runs (its step scale), and its replicas
    candidates: tuple[Candidate, ...]
    targets: Targets
    objective: str
    routed: tuple[tuple[str, str], ...] = ()  # kind -> pool, as the proxy routes now (the last plan's)


@dataclass(frozen=True)
class FleetPlan:
    assignment: Composition  # the running fleet, each kind to the pool that serves it best
    capacities: list[PoolRates]  # what one GPU of each running pool takes of each kind
    recommendation: Recommendation | None  # the best fleet of as many GPUs, beside the running one
    routed: Composition | None = None  # the running fleet as routed now, worked out alike
    law: tuple[KindLaw, ...] = ()  # each kind where ``assignment`` puts it
    routed_law: tuple[KindLaw, ...] = ()  # likewise, where ``routed`` does

    @property
    def gain(self) -> float:
        """How much more the new assignment carries than the routing now (inf when there is none to
        compare: no routing yet, or a kind it does not place)."""
        if self.routed is None or self.routed.capacity <= 0:
            return math.inf
        return self.assignment.capacity / self.routed.capacity - 1.0


def plan_fleet(inputs: FleetInputs, recommend: bool = True) -> FleetPlan:
    """The fleet plan (pure, and seconds of CPU: the proxy runs it off its event loop); ``recommend``: weigh
    the fleets that could be run too, not only the running one's assignment."""
    best, capacities = search.best_assignment(inputs.traffic, inputs.calibration, inputs.running, inputs.targets,
                                              inputs.objective)
    recommendation = search.recommend(inputs.traffic, inputs.calibration, sum(n for _, n in inputs.running),
                                      inputs.candidates, inputs.targets, inputs.objective,
                                      current=best.pools) if recommend else None
    routed = dict(inputs.routed)
    kinds = {k.name for k in inputs.traffic.kinds}
    now = None
    if kinds <= set(routed) and {routed[k] for k in kinds} <= {c.name for c, _ in inputs.running}:
        now = evaluate([PoolPlan(c, n, tuple(k for k in sorted(kinds) if routed[k] == c.name))
                        for c, n in inputs.running], inputs.traffic, inputs.calibration, inputs.targets)

    def law_of(composition: Composition | None) -> tuple[KindLaw, ...]:
        if composition is None:
            return ()
        return tuple(law_by_kind(composition, inputs.traffic, inputs.calibration, inputs.candidates))

    return FleetPlan(best, capacities, recommendation, now, law_of(best), law_of(now))
