"""Speculation simulated position by position, so acceptance emerges.

Each output position gets a target distribution over a slice of the
vocabulary whose entropy depends on the token's kind (JSON syntax, an enum
value, a copied value, free text, prose, code ...) and drifts along the
sequence (AR(1) on log-entropy: predictability is correlated, as in real text).
A model drafter's logits are the target's plus noise whose size is the
drafter's misalignment. Draft tokens are accepted by the standard rule: at
temperature 0 when the draft's argmax is the target's; above it (greedy
drafts) with the target's tempered probability of the draft token. A lookup
drafter (ngram, suffix) proposes only where the output copies the prompt.
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
    copied: np.ndarray  # (N,) bool: the token copies the prompt, and a lookup drafter gets it right

    def accepts(self, position: int, temperature: float) -> bool:
        if temperature <= 1e-5:
            return bool(self.accept_greedy[position])
        return bool(self.uniforms[position] < self.accept_prob_sampled[position])

    def entropy(self, position: int) -> float:
        lp = self.target_logprobs[position]
        return float(-(np.exp(lp) * lp).sum())


def position_model(
    kinds: list[str], profile: EngineProfile, temperature: float, rng: np.random.Generator, misalignment: float
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
    copied = np.array([kind == "copied" for kind in kinds], dtype=bool) & (rng.random(n) < profile.copy_fidelity)
    return PositionModel(logprobs, greedy, sampled, rng.random(n), copied)
