"""Learn what each request shape actually produces, and blend it with the prior.

Agents send the same tool set thousands of times, so the best predictor of a
request's output split is what requests of the same shape produced. A shape is
(model, digest of tool names and schemas, tool_choice, response format kind,
thinking, temperature band, last message role).

Update rule, per shape, with ``n`` observations so far, of which ``m`` called a tool:

    mean <- mean + (x - mean) / min(n, window)                 (running mean, then EWMA)
    p(call) = (k * p0 + n * call_rate) / (k + n)                (k = prior_strength, 2)
    tokens if a call = (j * prior + m * mean_calls) / (j + m)   (j = length_strength, 1)
    tokens if not    = (j * prior + (n-m) * mean_answers) / (j + n - m)
    estimate = p(call) * tokens if a call + (1 - p(call)) * tokens if not

so the prior counts for two responses and the first observation already moves
the estimate by a third; after a handful it sits on what the agent does, and
``window`` lets it follow drift. A request whose shape is fixed (no choice
between a call and prose) is one outcome, blended the same way. Memory is
bounded: at most ``capacity`` shapes, least recently used evicted first.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from draftgate.policy.structure.constraints import LEGACY_GUIDED, legacy_guided_fields
from draftgate.policy.structure.estimates import ClassTokens, StructureEstimate
from draftgate.policy.structure.length import bounded
from draftgate.policy.structure.measure import ObservedStructure

_MAX_SIGNED_TOOLS = 512
WINDOW = 50  # responses a shape's means are taken over before they become an EWMA
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


def shared_shape_key(body: Any, model: str | None = None, temperature: float | None = None) -> str:
    """``shape_key``, the same in every process (BLAKE2b), for a learner that proxy
    replicas share."""
    if not isinstance(body, dict):
        return "invalid"
    return hashlib.blake2b(shape_text(body, model, temperature).encode("utf-8", "surrogatepass"),
                           digest_size=8).hexdigest()


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
class OutcomeMeans:
    """Running means of one outcome's class tokens (then an EWMA over ``window``)."""

    count: int = 0
    s: float = 0.0
    r: float = 0.0
    f: float = 0.0

    def update(self, tokens: ClassTokens, window: int) -> None:
        self.count += 1
        step = 1.0 / min(self.count, window)
        self.s += (tokens.s - self.s) * step
        self.r += (tokens.r - self.r) * step
        self.f += (tokens.f - self.f) * step

    def blended(self, prior: ClassTokens, k: float) -> ClassTokens:
        """``prior`` worth ``k`` responses, against what this outcome's responses produced."""
        if self.count == 0:
            return prior
        n = float(self.count)
        return ClassTokens((k * prior.s + n * self.s) / (k + n), (k * prior.r + n * self.r) / (k + n),
                           (k * prior.f + n * self.f) / (k + n))


@dataclass(slots=True)
class ShapeStats:
    """What one shape's responses produced: how often they called a tool, and the
    tokens of the calls and of the answers apart."""

    count: int = 0
    call_rate: float = 0.0
    every: OutcomeMeans = field(default_factory=OutcomeMeans)
    calls: OutcomeMeans = field(default_factory=OutcomeMeans)
    answers: OutcomeMeans = field(default_factory=OutcomeMeans)

    def update(self, observed: ObservedStructure, window: int) -> None:
        self.count += 1
        called = observed.tool_calls > 0
        self.call_rate += (float(called) - self.call_rate) / min(self.count, window)
        self.every.update(observed.tokens, window)
        (self.calls if called else self.answers).update(observed.tokens, window)



class StructureLearner:
    """Per-shape outcome rates and lengths, LRU-bounded.

    A request whose answer may be a call or prose (``tool_choice`` auto) is learned
    as two outcomes: the call probability, from a prior worth ``prior_strength``
    responses, and each outcome's tokens, from a prior worth ``length_strength``
    responses of that outcome. Any other request is one outcome. The estimate is
    the expectation over the outcomes, which is what the gate prices.
    """

    def __init__(self, capacity: int = 4096, prior_strength: float = 2.0, window: int = WINDOW,
                 length_strength: float = 1.0) -> None:
        if capacity < 1 or prior_strength <= 0 or window < 1 or length_strength <= 0:
            raise ValueError("capacity >= 1, prior_strength > 0, length_strength > 0 and window >= 1 are required")
        self.capacity = capacity
        self.prior_strength = prior_strength
        self.length_strength = length_strength
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

    def stats(self, key: str) -> ShapeStats | None:
        """What this learner holds for ``key``, if anything."""
        return self._shapes.get(key)

    def adopt(self, key: str, stats: ShapeStats) -> None:
        """What the replicas sharing a store have learned of ``key``, in place of this one's own."""
        self._shapes[key] = stats
        self._shapes.move_to_end(key)
        while len(self._shapes) > self.capacity:
            self._shapes.popitem(last=False)

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
        n = float(stats.count)
        seq = float(prior.sequences)
        if prior.uncertain:
            k = self.prior_strength
            p_call = (k * prior.p_tool_call + n * stats.call_rate) / (k + n)
            call = stats.calls.blended(_times(prior.if_call, seq), self.length_strength)
            answer = stats.answers.blended(_times(prior.if_answer, seq), self.length_strength)
            split = (p_call * call.s + (1 - p_call) * answer.s, p_call * call.r + (1 - p_call) * answer.r,
                     p_call * call.f + (1 - p_call) * answer.f)
            confidence = n / (k + n)
            said = f"p(call) {prior.p_tool_call:.2f} -> {p_call:.2f}, "
        else:
            k = self.length_strength
            p_call = prior.p_tool_call
            learned = stats.every.blended(prior.expected_tokens, k)
            split = (learned.s, learned.r, learned.f)
            confidence = n / (k + n)
            said = ""
        notes: tuple[str, ...] = ()
        if body is not None:
            # each output's own prompt fills its context
            room = None if context_tokens is None else context_tokens - prior.prompt_tokens / prior.prompts
            split, bounds = bounded(body, split, room, prior.sequences)
            notes = tuple(note for note in bounds if note not in prior.reasons)
        tokens = ClassTokens(*split)
        total = tokens.total
        if total <= 0:
            return prior
        ws, wr = tokens.s / total, tokens.r / total
        note = f"learned from {stats.count} earlier response(s) of this shape: {said}w_S {prior.w_s:.2f} -> {ws:.2f}"
        # built field by field: dataclasses.replace costs more than everything else here
        return StructureEstimate(
            w_s=ws, w_r=wr, w_f=max(0.0, 1.0 - ws - wr), expected_tokens=tokens,
            reasons=prior.reasons + (note, *notes),
            temperature=prior.temperature, temperature_from_default=prior.temperature_from_default, n=prior.n,
            speculation_blockers=prior.speculation_blockers, p_tool_call=p_call,
            prompt_tokens=prior.prompt_tokens, constrained=prior.constrained, thinking=prior.thinking,
            prompts=prior.prompts, reasoning_hidden=prior.reasoning_hidden, if_call=prior.if_call,
            if_answer=prior.if_answer, confidence=confidence, observations=stats.count,
        )


def _times(tokens: ClassTokens, factor: float) -> ClassTokens:
    return tokens if factor == 1.0 else ClassTokens(tokens.s * factor, tokens.r * factor, tokens.f * factor)
