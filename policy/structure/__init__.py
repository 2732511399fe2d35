"""Request structure: how a request's output splits into schema-bound (S),
reasoning (R) and free prose (F), estimated before it runs, measured after,
and learned per request shape."""

from draftgate.policy.structure.estimates import ClassTokens, StructureEstimate
from draftgate.policy.structure.estimator import estimate
from draftgate.policy.structure.learner import StructureLearner, shape_key
from draftgate.policy.structure.measure import (
    ObservedStructure,
    TextParts,
    TokenCounter,
    measure,
    measure_parts,
)
from draftgate.policy.structure.messages_api import messages_chat_chunk, messages_chat_view
from draftgate.policy.structure.priors import DEFAULT_PRIORS, StructurePriors
from draftgate.policy.structure.responses_api import chat_completion, chat_view
from draftgate.policy.structure.sampling import QWEN3_DEFAULTS, SamplingDefaults

__all__ = [
    "DEFAULT_PRIORS", "QWEN3_DEFAULTS", "ClassTokens", "ObservedStructure", "SamplingDefaults",
    "StructureEstimate", "StructureLearner", "StructurePriors", "TextParts", "TokenCounter",
    "chat_completion", "chat_view", "estimate", "measure", "measure_parts", "messages_chat_chunk",
    "messages_chat_view", "shape_key",
]
