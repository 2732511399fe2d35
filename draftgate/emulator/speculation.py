"""Speculation simulated position by position, so acceptance emerges.

Each output position gets a target distribution over a slice of the
vocabulary whose entropy depends on the token's kind (JSON syntax, an enum
value, a copied value, free text, prose, code ...) and drifts along the
sequence (AR(1) on log-entropy: predictability is correlated, as in real text).
A model drafter's logits are the target's plus noise whose size is the
drafter's misalignment. Draft tokens are accepted by the standard rule: at
temperature 0 when the draft's argmax is the target's; above it (greedy
drafts) with the target's tempered probability of the draft token. A lookup
drafter (ngram, suffix) works on the token sequences alone (``lookup``).
Nothing here knows the Draft Law.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from draftgate.emulator.profile import EngineProfile

_R_GRID = np.linspace(1e-6, 0.999, 4000)


def _entropy_table(candidates: int) -> np.ndarray:
    """Entropy of p_j ~ r**j over ``candidates`` slots, for each r on the grid."""
    j = np.arange(candidates)
    logits = np.outer(np.log(_R_GRID), j)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return -(p * np.log(np.maximum(p, 1e-300))).sum(axis=1)


_TABLES: dict[int, np.ndarray] = {}


@dataclass
class PositionModel:
    """Per-position facts of one output sequence, fixed when it is admitted."""

    target_logprobs: np.ndarray  # (N, K) log-probabilities; index 0 is the target's argmax
    accept_greedy: np.ndarray  # (N,) bool: draft argmax equals target argmax
    accept_prob_sampled: np.ndarray  # (N,) target's tempered probability of the draft token
    uniforms: np.ndarray  # (N,) draws that decide sampled acceptance
    proposes: np.ndarray  # (N,) bool: a lookup drafter has a proposal for this position
    right: np.ndarray  # (N,) bool: and what it proposes is the token the target emits

    def accepts(self, position: int, temperature: float) -> bool:
        if temperature <= 1e-5:
            return bool(self.accept_greedy[position])
        return bool(self.uniforms[position] < self.accept_prob_sampled[position])

    def entropy(self, position: int) -> float:
        lp = self.target_logprobs[position]
        return float(-(np.exp(lp) * lp).sum())


def lookup(prompt: list[str], output: list[str], n: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """What a prompt-lookup drafter does at each output position, as vLLM's ngram proposer:
    it proposes when the ``n`` tokens before the position occurred earlier (in the prompt or
    the output so far), the tokens that followed them there; the proposal is right when the
    token that followed is the one the target emits. (vLLM matches the longest suffix from
    ``prompt_lookup_max`` down to ``prompt_lookup_min``; one length, ``n``, is kept here.)"""
    seen: dict[tuple[str, ...], set[str]] = {}
    context = list(prompt)
    for i in range(len(context) - n):
        seen.setdefault(tuple(context[i:i + n]), set()).add(context[i + n])
    proposes = np.zeros(len(output), dtype=bool)
    right = np.zeros(len(output), dtype=bool)
    for i, token in enumerate(output):
        key = tuple(context[-n:]) if len(context) >= n else None
        if key is not None and key in seen:
            proposes[i] = True
            right[i] = token in seen[key]
        if key is not None:
            seen.setdefault(key, set()).add(token)
        context.append(token)
    return proposes, right


def position_model(
    kinds: list[str], profile: EngineProfile, temperature: float, rng: np.random.Generator, misalignment: float,
    lookups: tuple[np.ndarray, np.ndarray] | None = None,
) -> PositionModel:
    """Draw the target and draft distributions for a sequence of output token kinds."""
    n, k = len(kinds), profile.candidates
    table = _TABLES.get(k)
    if table is None:
        table = _TABLES[k] = _entropy_table(k)
    means = np.log(np.maximum([profile.entropy.get(kind, profile.entropy["prose"]) for kind in kinds], 1e-4))
    noise = rng.standard_normal(n) * profile.entropy_spread
    # AR(1) along the sequence, scaled to keep the marginal spread as configured
    phi = profile.entropy_correlation
    drift = np.empty(n)
    level = 0.0
    scale = np.sqrt(1 - phi * phi)
    for i in range(n):
        level = phi * level + scale * noise[i]
        drift[i] = level
    entropy = np.minimum(np.exp(means + drift), table[-1] * 0.999)
    r = np.interp(entropy, table, _R_GRID)
    j = np.arange(k)
    logits = np.outer(np.log(r), j)
    logprobs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    draft = logits + rng.standard_normal((n, k)) * misalignment
    draft_top = draft.argmax(axis=1)
    greedy = draft_top == 0
    if temperature > 1e-5:
        tempered = logprobs / temperature
        tempered = tempered - np.log(np.exp(tempered).sum(axis=1, keepdims=True))
        sampled = np.exp(tempered[np.arange(n), draft_top])
    else:
        sampled = greedy.astype(float)
    proposes, right = lookups if lookups is not None else (np.zeros(n, dtype=bool), np.zeros(n, dtype=bool))
    return PositionModel(logprobs, greedy, sampled, rng.random(n), proposes, right)
