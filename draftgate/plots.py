"""Figures for operators: the law's saving curve and where it breaks even.

matplotlib is an optional extra (``draftgate[plot]``); importing this module
without it raises ImportError, which callers turn into a one-line message.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers
import matplotlib.pyplot as plt  # noqa: E402

from draftgate.policy import law  # noqa: E402

_GAMMAS = (4, 8, 16)
_COLOURS = {4: "#1f77b4", 8: "#d62728", 16: "#2ca02c"}


def plot_law(
    path: str, kappa: float, delta: float, d: float, rho: Sequence[float], mix: Sequence[float]
) -> None:
    """Saving against w_S (R:F split of ``mix`` held) for gamma in {4, 8, 16}.

    Solid: the span form the gate uses; dashed: the paper's mixture. Vertical
    lines mark the exact break-even w_S (solid) and the closed form's (dotted).
    """
    rhos = law.ClassRho.from_sequence(rho)
    non_schema = mix[1] + mix[2]
    r_share = mix[1] / non_schema if non_schema > 0 else 0.0
    xs = [i / 200 for i in range(201)]
    fig, ax = plt.subplots(figsize=(8, 5))
    for gamma in _GAMMAS:
        drafter = law.Drafter(gamma, delta, d)
        spans, mixture = [], []
        for w in xs:
            m = law.ClassMix(w, (1 - w) * r_share, (1 - w) * (1 - r_share))
            spans.append(law.predict_spans(m, rhos, kappa, drafter).saving)
            mixture.append(law.predict_mixture(m, rhos, kappa, drafter).saving)
        colour = _COLOURS[gamma]
        ax.plot(xs, spans, color=colour, label=f"gamma={gamma} spans")
        ax.plot(xs, mixture, color=colour, linestyle="--", alpha=0.6, label=f"gamma={gamma} mixture")
        probe = law.ClassMix(0.0, r_share, 1 - r_share)
        exact = law.break_even_ws(law.break_even_eps(drafter), kappa, rhos, probe)
        closed = law.break_even_ws(law.break_even_eps_closed_form(drafter), kappa, rhos, probe)
        if exact.value is not None and exact.clipped is None:
            ax.axvline(exact.value, color=colour, linewidth=1)
        if closed.value is not None and closed.clipped is None:
            ax.axvline(closed.value, color=colour, linewidth=1, linestyle=":")
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xlabel("schema fraction w_S")
    ax.set_ylabel("saving (1 - cost per token ratio)")
    ax.set_title(f"Draft Law: kappa={kappa}, delta={delta}, d={d}; break-even: solid exact, dotted closed form")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
