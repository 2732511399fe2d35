"""The kinds of request draftgate tells apart: one vocabulary for the routing config,
the fleet plan, the metrics' ``kind`` label, the request log and explain.

A kind is read from the gate's estimate of a request, so a request's kind is
known before it is sent. The verdict's *workloads* (``draftgate.workloads.mix``)
are where traffic comes from, not kinds: a single agent session holds tool calls
and prose turns alike.
"""

from __future__ import annotations

from draftgate.policy.structure.estimates import StructureEstimate

KINDS = ("tool", "tool_auto", "json", "reasoning", "prose")


def kind_of(estimate: StructureEstimate) -> str:
    """The kind ``estimate`` says its request is: ``reasoning`` when it thinks first,
    ``tool`` when it must call a tool, ``json`` when its answer is otherwise bound
    to a schema or grammar, ``tool_auto`` when it may call one, else ``prose``."""
    if estimate.thinking:
        return "reasoning"
    if estimate.constrained and estimate.p_tool_call >= 1.0:
        return "tool"
    if estimate.constrained:
        return "json"
    if estimate.p_tool_call > 0:
        return "tool_auto"
    return "prose"
