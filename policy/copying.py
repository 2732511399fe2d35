"""What a copy-based drafter (vLLM's ``ngram``, ``suffix``) will accept, from a request's structure.

A lookup drafter proposes only tokens that already appeared: the tokens that
followed the context's last few tokens where they occurred before. What it gets
right is the share of the answer that repeats the prompt or itself, not how
predictable the answer is, so the acceptance law (``law.py``) does not apply.
At temperature 0 the share of an answer's tokens that are accepted drafts, ``q``,
sets everything: ``N`` tokens take ``(1 - q) * N`` rounds, so
``tau = q / (1 - q)`` accepted tokens per round.

``q`` is predicted per class from what the request holds to copy
(``CopySources``, read by the estimator): a tool call copies its name, its keys
and the call format from the tool list and the format line the chat template
puts in the system prompt, and much more once earlier calls are in the
conversation; prose copies from a long conversation, and most where code is in
it. The coefficients, for each lookup setting, were fitted by ``draftgate
measure-ngram --fit`` to exact replays of vLLM's proposer on real requests and
answers (docs/model.md, "Copy-based drafters"); a deeper ``k`` raises ``q``
along one curve (``depth_factor``) for every class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# Past this much conversation text (characters), a longer one adds nothing more to copy from.
CONTEXT_SATURATION_CHARS = 2000.0
_DEPTH_REACH = 0.365  # q(k=1) is 1 - 0.365 of q at great depth; the gap shrinks by 0.6 each token more
_DEPTH_DECAY = 0.6
_REFERENCE_DEPTH = 4  # the depth the coefficients are stated at
_MAX_SHARE = 0.98  # of k/(k+1), the share a perfect copy reaches


@dataclass(frozen=True, slots=True)
class CopySources:
    """What of a request an answer could copy from."""

    text_chars: int = 0  # the conversation's message text, every role
    code: bool = False  # a fenced code block is in it
    earlier_calls: int = 0  # tool calls earlier in the conversation


@dataclass(frozen=True, slots=True)
class CopyRates:
    """Accepted share of an answer's tokens at depth 4, per class: a base, and what each source adds.

    ``f_context`` is reached at ``CONTEXT_SATURATION_CHARS`` of conversation text; ``s_history``
    applies once the conversation holds a call. Reasoning has no committed measurement and
    uses the prose coefficients.
    """

    s_base: float
    s_history: float
    f_base: float
    f_context: float
    f_code: float
    # draft tokens proposed per token accepted: what verification pays for (a round with no
    # match proposes nothing and costs one target pass)
    drafted_per_accepted: float = 3.0


# Fitted by `draftgate measure-ngram --fit` (calibration split of the committed BFCL and
# ShareGPT samples, Qwen3's tokenizer), keyed by (prompt_lookup_min, prompt_lookup_max).
RATES: dict[tuple[int, int], CopyRates] = {
    (1, 3): CopyRates(s_base=0.5053, s_history=0.0296, f_base=0.1531, f_context=0.1152, f_code=0.1928,
                      drafted_per_accepted=5.915),
    (2, 4): CopyRates(s_base=0.4712, s_history=0.0224, f_base=0.0943, f_context=0.1195, f_code=0.2065,
                      drafted_per_accepted=3.233),
    (3, 5): CopyRates(s_base=0.3921, s_history=0.0396, f_base=0.054, f_context=0.0977, f_code=0.2141,
                      drafted_per_accepted=2.487),
    (4, 4): CopyRates(s_base=0.3063, s_history=0.0143, f_base=0.0323, f_context=0.0799, f_code=0.2118,
                      drafted_per_accepted=2.173),
    (5, 5): CopyRates(s_base=0.2423, s_history=0.0, f_base=0.0165, f_context=0.0725, f_code=0.2053,
                      drafted_per_accepted=2.019),
}
# Suffix decoding's own, fitted the same way (``--method suffix``): it matches suffixes of any length
# and also copies the answers the server gave before, so no lookup setting applies.
SUFFIX_RATES = CopyRates(s_base=0.5564, s_history=0.0357, f_base=0.1606, f_context=0.1009, f_code=0.1875,
                         drafted_per_accepted=3.239)
DEFAULT_LOOKUP = (5, 5)  # vLLM's, when a speculative config names neither bound
DEFAULT_RATES = RATES[DEFAULT_LOOKUP]


def lookup_bounds(lookup_min: int | None, lookup_max: int | None) -> tuple[int, int]:
    """ngram's ``prompt_lookup_min`` and ``_max`` as vLLM resolves them: both 5 when neither is
    given, else the one given for both."""
    if lookup_min is None and lookup_max is None:
        return DEFAULT_LOOKUP
    low = lookup_min if lookup_min is not None else lookup_max
    high = lookup_max if lookup_max is not None else lookup_min
    assert low is not None and high is not None
    return low, high


def tau_over_every_round(accepted: float, tokens: float) -> float | None:
    """Accepted tokens per round, rounds that drafted nothing counted: each round emits one token and
    the accepted ones. vLLM's own figures count only the rounds that drafted, which a lookup drafter
    does only where it finds a match. None when the counts cannot be an answer's."""
    if 0 <= accepted < tokens:
        return accepted / (tokens - accepted)
    return None


def rates_for(method: str, lookup: tuple[int, int]) -> tuple[CopyRates, tuple[int, int] | str]:
    """The committed coefficients for a drafter: suffix decoding's, or for ngram those of its lookup
    setting, or of the nearest one measured (by the minimum match first: it decides how readily a
    copy starts); and which were used."""
    if method == "suffix":
        return SUFFIX_RATES, "suffix"
    if lookup in RATES:
        return RATES[lookup], lookup
    nearest = min(RATES, key=lambda s: (abs(s[0] - lookup[0]), abs(s[1] - lookup[1])))
    return RATES[nearest], nearest


def depth_factor(k: int) -> float:
    """How much of the copy a depth-``k`` drafter reaches, relative to depth 4: copied runs are
    short, so depth helps little past a few tokens (1: 0.69, 2: 0.85, 8: 1.07 in the replays)."""
    def reach(depth: int) -> float:
        return 1.0 - _DEPTH_REACH * _DEPTH_DECAY ** (depth - 1)

    return reach(max(1, k)) / reach(_REFERENCE_DEPTH)


def accepted_shares(sources: CopySources, k: int, rates: CopyRates) -> dict[str, float]:
    """Predicted share of each class's tokens that are accepted drafts, at depth ``k``."""
    context = min(1.0, sources.text_chars / CONTEXT_SATURATION_CHARS)
    prose = rates.f_base + rates.f_context * context + (rates.f_code if sources.code else 0.0)
    schema = rates.s_base + (rates.s_history if sources.earlier_calls else 0.0)
    cap = _MAX_SHARE * k / (k + 1.0)
    factor = depth_factor(k)
    return {c: min(cap, max(0.0, share * factor)) for c, share in (("s", schema), ("r", prose), ("f", prose))}


def lookup_taus(sources: CopySources, k: int, rates: CopyRates = DEFAULT_RATES) -> dict[str, float]:
    """Per-class tau of a lookup drafter at depth ``k`` and temperature 0: ``q / (1 - q)``."""
    return {c: q / (1.0 - q) for c, q in accepted_shares(sources, k, rates).items()}


def drafted_per_round(taus: Mapping[str, float], mix: Mapping[str, float], k: int, rates: CopyRates) -> float:
    """Draft tokens a lookup drafter proposes per round, over a request's classes weighted by
    their rounds: it proposes only where it finds a match, so fewer than ``k``."""
    rounds = {c: w / (taus[c] + 1.0) for c, w in mix.items()}
    total = sum(rounds.values())
    if total <= 0.0:
        return 0.0
    return sum(r * min(float(k), rates.drafted_per_accepted * taus[c]) for c, r in rounds.items()) / total


def fit_rates(samples: list[tuple[str, CopySources, int, int, int]]) -> CopyRates:
    """Coefficients from replayed answers ``(class, sources, tokens, accepted, drafted)`` at depth
    4, by least squares weighted by tokens; a class with no samples keeps zeros."""
    import numpy as np

    def solve(rows: list[tuple[list[float], int, int]], width: int) -> list[float]:
        if not rows:
            return [0.0] * width
        x = np.array([features for features, _, _ in rows])
        y = np.array([accepted / tokens for _, tokens, accepted in rows])
        w = np.sqrt(np.array([tokens for _, tokens, _ in rows], dtype=float))
        solution, *_ = np.linalg.lstsq(x * w[:, None], y * w, rcond=None)
        return [max(0.0, float(v)) for v in solution]

    schema = [([1.0, 1.0 if s.earlier_calls else 0.0], n, a) for c, s, n, a, _ in samples if c == "s"]
    prose = [([1.0, min(1.0, s.text_chars / CONTEXT_SATURATION_CHARS), 1.0 if s.code else 0.0], n, a)
             for c, s, n, a, _ in samples if c == "f"]
    s_base, s_history = solve(schema, 2)
    f_base, f_context, f_code = solve(prose, 3)
    accepted = sum(a for *_, a, _ in samples)
    drafted = sum(d for *_, d in samples)
    return CopyRates(round(s_base, 4), round(s_history, 4), round(f_base, 4), round(f_context, 4), round(f_code, 4),
                     round(drafted / accepted, 3) if accepted else 3.0)

