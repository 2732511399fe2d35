"""What a known model family does when a request does not say.

vLLM applies a model's ``generation_config.json`` to every field a client omits,
the model's chat template decides whether it thinks before answering, and its
tool-call format how many tokens wrap a call. Each changes what a request costs, so the estimator starts from the family's own
behaviour where it knows the family, and from vLLM's bare defaults (temperature
1, no thinking) where it does not. Configuration overrides both: a pool's
``sampling_defaults``, ``structure_priors.thinking_by_default`` and
``structure_priors.tool_call_wrapper_tokens``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from draftgate.policy.structure.sampling import NO_DEFAULTS, SamplingDefaults


@dataclass(frozen=True, slots=True)
class ModelFamily:
    name: str
    sampling: SamplingDefaults  # the family's generation_config.json
    thinks_by_default: bool  # its chat template thinks unless told enable_thinking: false
    # the tokens around a call the model writes unforced (tool_choice auto), in its own format
    tool_call_wrapper_tokens: float = 8.0


# Qwen3 writes an unforced call as <tool_call>\n{...}\n</tool_call> (vLLM's hermes parser), and
# both tags are single tokens of its vocabulary: four tokens around the call's JSON.
_QWEN_TAGS = 4.0
# Qwen3's hybrid models (Qwen3-32B, Qwen3-8B, ...): generation_config.json sets temperature
# 0.6, top_p 0.95, top_k 20, and the template thinks unless told enable_thinking: false.
QWEN3 = ModelFamily("Qwen3", SamplingDefaults(temperature=0.6, top_p=0.95, top_k=20), True, _QWEN_TAGS)
# The 2507 Instruct models and Qwen3-Coder never think; their generation config is 0.7 / 0.8 / 20.
QWEN3_INSTRUCT = ModelFamily("Qwen3 Instruct", SamplingDefaults(temperature=0.7, top_p=0.8, top_k=20), False,
                             _QWEN_TAGS)
# The 2507 Thinking models always think.
QWEN3_THINKING = ModelFamily("Qwen3 Thinking", SamplingDefaults(temperature=0.6, top_p=0.95, top_k=20), True,
                             _QWEN_TAGS)
UNKNOWN = ModelFamily("unknown", NO_DEFAULTS, False)

# First match wins: the specific variants before the hybrid family they share a prefix with.
_PATTERNS: tuple[tuple[re.Pattern[str], ModelFamily], ...] = (
    (re.compile(r"qwen3-coder|qwen3-.*instruct"), QWEN3_INSTRUCT),
    (re.compile(r"qwen3-.*thinking"), QWEN3_THINKING),
    (re.compile(r"qwen3-"), QWEN3),
)


def family_of(model: object) -> ModelFamily:
    """The family a served model name belongs to (``Qwen/Qwen3-32B``, ``qwen3-32b-awq``, ...),
    or ``UNKNOWN``."""
    if not isinstance(model, str):
        return UNKNOWN
    name = model.lower()
    for pattern, family in _PATTERNS:
        if pattern.search(name):
            return family
    return UNKNOWN
