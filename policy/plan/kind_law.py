"""The Draft Law per kind where a composition puts it: the kind's schema share w_S against the share
w_S* at which its pool's drafter breaks even at the batch the pool runs. ``draftgate plan`` and explain
print it, so an operator sees why a kind was moved to a plain pool (or kept speculating).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from draftgate.policy import law
from draftgate.policy.calibration import Calibration
from draftgate.policy.gate import PoolView, predicted_taus
from draftgate.policy.plan.model import Candidate, Composition, Traffic


@dataclass(frozen=True)
class KindLaw:
    """The Draft Law for one kind where the plan puts it: its schema share ``w_s`` against the share
    ``w_s_star`` at which ``drafter`` breaks even at the batch the kind's pool runs (None, with
    ``reason``, where no share makes it pay or every share does)."""

    kind: str
    pool: str
    drafter: str  # the kind's pool when it speculates, else the speculating candidate it was not given
    batch: float
    w_s: float
    w_s_star: float | None
    reason: str | None

    @property
    def pays(self) -> bool | None:
        return None if self.w_s_star is None else self.w_s >= self.w_s_star

    def describe(self) -> str:
        where = f"{self.kind} on {self.pool} (batch {self.batch:.1f}): w_S {self.w_s:.2f}"
        if self.w_s_star is None:
            return f"{where}; w_S* for {self.drafter} undefined: {self.reason}"
        verdict = "speculation pays" if self.pays else "speculation costs capacity"
        return f"{where} against w_S* {self.w_s_star:.2f} for {self.drafter}: {verdict}"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "pool": self.pool, "drafter": self.drafter, "batch": round(self.batch, 3),
                "w_s": round(self.w_s, 4), "w_s_star": None if self.w_s_star is None else round(self.w_s_star, 4),
                "pays": self.pays, "reason": self.reason, "summary": self.describe()}


def law_by_kind(composition: Composition, traffic: Traffic, calibration: Calibration,
                candidates: Sequence[Candidate]) -> list[KindLaw]:
    """Per kind, at the batch its pool runs (``composition.loads``, at the traffic's rate): w_S against
    w_S* for its pool's drafter, or, on a plain pool, for the first speculating candidate."""
    drafters = [c for c in candidates if c.speculative]
    out = []
    for plan, load in zip(composition.pools, composition.loads or (None,) * len(composition.pools)):
        against = plan.candidate if plan.candidate.speculative else next(iter(drafters), None)
        if against is None:
            continue
        batch = load.batch if load is not None and math.isfinite(load.batch) else 1.0
        depth = against.depth_at(max(1.0, batch)) or against.gamma
        cal = calibration.pool(against.name, depth, against.method)
        drafter = law.Drafter(depth, cal.delta(max(1.0, batch)), cal.draft_cost_with(against.draft_cost))
        view = PoolView(against.name, against.method, gamma=depth, lookup=against.lookup)
        for name in plan.kinds:
            kind = traffic.kind(name)
            ws = law.break_even_ws_spans(predicted_taus(calibration, view, kind.temperature, kind.copyable), drafter,
                                         kind.mix)
            star = None if ws.value is None or math.isnan(ws.value) else ws.value
            out.append(KindLaw(name, plan.candidate.name, against.name, batch, kind.mix.s, star, ws.reason))
    return out
