"""The fleet plan, in one place: which pools to run on N GPUs, how many GPUs each, and which kinds of
request each serves; and, for the fleet that runs, where each kind goes now and how far the plan's
predictions are from what the pools answer.

- ``model``: what a composition of pools carries within the latency targets, and at what cost (a
  queueing model over the calibration's step times, priced by ``gate.step_seconds``, the gate's own).
- ``search``: every composition of up to ``MAX_POOLS`` pools, ranked by the model.
- ``assignment``: each kind's shares of the pools, spilled as the kinds' rates need.
- ``kind_law``: the Draft Law per kind where a composition puts it.
- ``traffic``: the kinds read from per-request rows, and the live window of them.
- ``running``: the plan for the fleet that runs, from the proxy's copy of its state.
- ``feedback``: the plan's predictions against the pools' answers, and the step scale that closes
  the difference.

Pure like the rest of ``policy``: the proxy's periodic loop (``proxy/fleet_planning.py``), the
command's input (``draftgate plan``) and the verdict's trials in simulation
(``draftgate/evaluate/trial.py``) are its callers.
"""

from draftgate.policy.plan.assignment import Assignment, PoolRates, Turns, load, spill
from draftgate.policy.plan.feedback import LEAST_ANSWERS, Latencies, PlanFeedback
from draftgate.policy.plan.kind_law import KindLaw, law_by_kind
from draftgate.policy.plan.model import (
    Candidate,
    Composition,
    FleetModel,
    GpuLoad,
    Kind,
    PoolPlan,
    Targets,
    Traffic,
    capacity_of_gpu,
    evaluate,
    gpu_load,
    within_targets,
)
from draftgate.policy.plan.running import FleetInputs, FleetPlan, plan_fleet
from draftgate.policy.plan.search import MAX_POOLS, Recommendation, best_assignment, default_candidates, recommend
from draftgate.policy.plan.traffic import TrafficWindow, kinds_from

__all__ = [
    "LEAST_ANSWERS", "MAX_POOLS",
    "Assignment", "Candidate", "Composition", "FleetInputs", "FleetModel", "FleetPlan", "GpuLoad", "Kind", "KindLaw",
    "Latencies", "PlanFeedback", "PoolPlan", "PoolRates", "Recommendation", "Targets", "Traffic", "TrafficWindow",
    "Turns",
    "best_assignment", "capacity_of_gpu", "default_candidates", "evaluate", "gpu_load", "kinds_from", "law_by_kind",
    "load", "plan_fleet", "recommend", "spill", "within_targets",
]
