"""Learn what each request shape actually produces, and blend it with the prior.

Agents send the same tool set thousands of times, so the best predictor of a
request's output split is what requests of the same shape produced. A shape is
(model, digest of tool names and schemas, tool_choice, response format kind,
thinking, temperature band, last message role).

Update rule, per shape and per class c, with ``n`` observations so far:

    mean_c <- mean_c + (x_c - mean_c) / min(n, window)      (running mean, then EWMA)
    estimate_c = (k * prior_c + n * mean_c) / (k + n)        (k = prior_strength)

so the first observation already moves the estimate by n/(k+n) and, after a
handful, it sits on what the agent does; ``window`` lets it follow drift. Memory
is bounded: at most ``capacity`` shapes, least recently used evicted first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from draftgate.policy.structure.constraints import LEGACY_GUIDED, legacy_guided_fields
from draftgate.policy.structure.estimates import ClassTokens, StructureEstimate
from draftgate.policy.structure.length import bounded
from draftgate.policy.structure.measure import ObservedStructure

_MAX_SIGNED_TOOLS = 512
_SIXTY_FOUR_BITS = (1 << 64) - 1


def shape_key(body: Any, model: str | None = None, temperature: float | None = None) -> str:
    """A short digest that is equal for requests an agent sends from the same step.

    It keys this process's learner and nothing else, so it is Python's own string
    hash (salted per process, as dict keys are): a tenth of the cost of BLAKE2b,
    and no one outside can aim requests at one shape.
    """
    if not isinstance(body, dict):
        return "invalid"
    return f"{hash(shape_text(body, model, temperature)) & _SIXTY_FOUR_BITS:016x}"


def shape_text(body: dict[str, Any], model: str | None = None, temperature: float | None = None) -> str:
    """What ``shape_key`` hashes: the fields that tell one agent step from another."""
    tools = body.get("tools")
    tool_digest = _tools_signature(tools) if tools else "-"
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        fn = choice.get("function")
        choice_key = f"named:{fn.get('name')}" if isinstance(fn, dict) else "named"
    else:
        choice_key = str(choice)
    fmt = body.get("response_format")
    fmt_key = str(fmt.get("type")) if isinstance(fmt, dict) else "-"
    structured = body.get("structured_outputs")
    if isinstance(structured, dict):
        fmt_key += "+so:" + ",".join(sorted(k for k, v in structured.items() if v is not None))
    if not body.keys().isdisjoint(LEGACY_GUIDED):  # constraints on servers older than 0.12
        fmt_key += "+guided:" + ",".join(legacy_guided_fields(body))
    kwargs = body.get("chat_template_kwargs")
    thinking = kwargs.get("enable_thinking") if isinstance(kwargs, dict) else None
    effort = body.get("reasoning_effort")
    t = temperature if temperature is not None else body.get("temperature")
    band = "default" if not isinstance(t, (int, float)) else ("greedy" if t <= 0.05 else ("low" if t <= 0.7 else "high"))
    messages = body.get("messages")
    last_role = messages[-1].get("role") if isinstance(messages, list) and messages and isinstance(messages[-1], dict) else "-"
    return f"{model or body.get('model')}|{tool_digest}|{choice_key}|{fmt_key}|{thinking}|{effort}|{band}|{last_role}"


def _tools_signature(tools: Any) -> str:
    """Tool names with their argument names: what distinguishes one agent step's
    tool set from another's, at a fraction of the cost of hashing whole schemas."""
    if not isinstance(tools, list):
        return "invalid"
    parts = []
    for tool in tools[:_MAX_SIGNED_TOOLS]:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict):
            parts.append("?")
            continue
        params = fn.get("parameters")
        props = params.get("properties") if isinstance(params, dict) else None
        keys = ",".join(props) if isinstance(props, dict) else ""
        parts.append(f"{fn.get('name')}({keys})")
    return ";".join(parts)


@dataclass(slots=True)
class ShapeStats:
    count: int = 0
    tokens_s: float = 0.0
    tokens_r: float = 0.0
    tokens_f: float = 0.0

    def update(self, observed: ObservedStructure, window: int) -> None:
        self.count += 1
        step = 1.0 / min(self.count, window)
        self.tokens_s += (observed.tokens.s - self.tokens_s) * step
        self.tokens_r += (observed.tokens.r - self.tokens_r) * step
        self.tokens_f += (observed.tokens.f - self.tokens_f) * step


class StructureLearner:
    """Per-shape running means of observed class tokens, LRU-bounded."""

    def __init__(self, capacity: int = 4096, prior_strength: float = 1.0, window: int = 50) -> None:
        if capacity < 1 or prior_strength <= 0 or window < 1:
            raise ValueError("capacity >= 1, prior_strength > 0 and window >= 1 are required")
        self.capacity = capacity
        self.prior_strength = prior_strength
        self.window = window
        self._shapes: OrderedDict[str, ShapeStats] = OrderedDict()

    def __len__(self) -> int:
        return len(self._shapes)

    def observe(self, key: str, observed: ObservedStructure) -> None:
        stats = self._shapes.get(key)
        if stats is None:
            stats = self._shapes[key] = ShapeStats()
            if len(self._shapes) > self.capacity:
                self._shapes.popitem(last=False)
        else:
            self._shapes.move_to_end(key)
        stats.update(observed, self.window)

    def observations(self, key: str) -> int:
        stats = self._shapes.get(key)
        return stats.count if stats else 0

    def blend(self, key: str, prior: StructureEstimate, body: dict[str, Any] | None = None,
              context_tokens: float | None = None) -> StructureEstimate:
        """The prior moved toward what this shape has produced, then held within the bounds
        of ``body``, the request the prior was made for.

        The shape's earlier requests ran under their own caps; this one's ``max_tokens``
        (or the context left after its prompt, of ``context_tokens``) still stops it, and
        a cap that cuts reasoning short leaves no room for the answer after it.
        """
        stats = self._shapes.get(key)
        if stats is None or stats.count == 0:
            return prior
        self._shapes.move_to_end(key)
        k, n = self.prior_strength, float(stats.count)
        e = prior.expected_tokens
        split = ((k * e.s + n * stats.tokens_s) / (k + n),
                 (k * e.r + n * stats.tokens_r) / (k + n),
                 (k * e.f + n * stats.tokens_f) / (k + n))
        notes: tuple[str, ...] = ()
        if body is not None:
            # each output's own prompt fills its context
            room = None if context_tokens is None else context_tokens - prior.prompt_tokens / prior.prompts
            split, said = bounded(body, split, room, prior.sequences)
            notes = tuple(note for note in said if note not in prior.reasons)
        tokens = ClassTokens(*split)
        total = tokens.total
        if total <= 0:
            return prior
        ws, wr = tokens.s / total, tokens.r / total
        note = f"learned from {stats.count} earlier response(s) of this shape: w_S {prior.w_s:.2f} -> {ws:.2f}"
        # built field by field: dataclasses.replace costs more than everything else here
        return StructureEstimate(
            w_s=ws, w_r=wr, w_f=max(0.0, 1.0 - ws - wr), expected_tokens=tokens,
            reasons=prior.reasons + (note, *notes),
            temperature=prior.temperature, temperature_from_default=prior.temperature_from_default, n=prior.n,
            speculation_blockers=prior.speculation_blockers, p_tool_call=prior.p_tool_call,
            prompt_tokens=prior.prompt_tokens, constrained=prior.constrained, thinking=prior.thinking,
            prompts=prior.prompts, reasoning_hidden=prior.reasoning_hidden,
        )
