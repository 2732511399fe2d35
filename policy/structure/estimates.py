"""What an estimate says: the value objects the estimator builds, and the learner,
the gate and the proxy read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from draftgate.policy.copying import CopySources

_MAX_OUTPUTS = 4096  # counted per prompt: n comes from clients, and the arithmetic must stay finite


@dataclass(frozen=True, slots=True)
class ClassTokens:
    s: float = 0.0
    r: float = 0.0
    f: float = 0.0

    @property
    def total(self) -> float:
        return self.s + self.r + self.f

    def as_dict(self) -> dict[str, float]:
        return {"s": self.s, "r": self.r, "f": self.f}


@dataclass(frozen=True, slots=True)
class StructureEstimate:
    """What the gate knows of a request's output before it runs."""

    w_s: float
    w_r: float
    w_f: float
    expected_tokens: ClassTokens
    reasons: tuple[str, ...]
    temperature: float
    temperature_from_default: bool
    n: int
    speculation_blockers: tuple[str, ...]
    p_tool_call: float
    prompt_tokens: float
    constrained: bool  # output under a grammar: tool_choice required/named, JSON format, structured_outputs
    thinking: bool
    prompts: int = 1  # a completions prompt may be a batch, each answered n times
    # thinking with include_reasoning false: the answer leaves the reasoning out, usage counts it
    reasoning_hidden: bool = False
    # One output's tokens if the model calls a tool and if it answers without one, before
    # the request's caps: ``expected_tokens`` mixes them by ``p_tool_call`` (equal when the
    # request fixes the answer's shape). The learner learns each outcome apart.
    if_call: ClassTokens = ClassTokens()
    if_answer: ClassTokens = ClassTokens()
    # The share of the estimate that rests on observed responses of the request's shape:
    # 0 for the priors alone, towards 1 as observations outweigh them.
    confidence: float = 0.0
    observations: int = 0
    # what the answer could copy from: what a lookup drafter (ngram, suffix) is priced by
    copyable: CopySources = CopySources()

    @property
    def uncertain(self) -> bool:
        """Whether the answer may be a call or prose: two outcomes to price."""
        return 0.0 < self.p_tool_call < 1.0 and self.if_call != self.if_answer

    @property
    def sequences(self) -> int:
        """The outputs the request makes, which ``expected_tokens`` counts, as usage does."""
        return outputs_of(self.n, self.prompts)

    @property
    def speculation_unsupported(self) -> bool:
        return bool(self.speculation_blockers)

    @classmethod
    def unknown(cls, reason: str) -> StructureEstimate:
        """An estimate that claims nothing: all prose, no length, for when none could be made."""
        return cls(w_s=0.0, w_r=0.0, w_f=1.0, expected_tokens=ClassTokens(), reasons=(reason,), temperature=1.0,
                   temperature_from_default=True, n=1, speculation_blockers=(), p_tool_call=0.0, prompt_tokens=0.0,
                   constrained=False, thinking=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "w_s": self.w_s, "w_r": self.w_r, "w_f": self.w_f,
            "expected_tokens": self.expected_tokens.as_dict(),
            "reasons": list(self.reasons),
            "temperature": self.temperature,
            "temperature_from_default": self.temperature_from_default,
            "n": self.n,
            "speculation_blockers": list(self.speculation_blockers),
            "p_tool_call": self.p_tool_call,
            "prompt_tokens": self.prompt_tokens,
            "constrained": self.constrained,
            "thinking": self.thinking,
            "prompts": self.prompts,
            "reasoning_hidden": self.reasoning_hidden,
            "if_call": self.if_call.as_dict(),
            "if_answer": self.if_answer.as_dict(),
            "confidence": self.confidence,
            "observations": self.observations,
            "copyable": {"text_chars": self.copyable.text_chars, "code": self.copyable.code,
                     "earlier_calls": self.copyable.earlier_calls},
        }


def outputs_of(n: int, prompts: int) -> int:
    """The outputs a request makes: ``n`` for each prompt (bounded: ``n`` comes from clients)."""
    return (n if n < _MAX_OUTPUTS else _MAX_OUTPUTS) * prompts
