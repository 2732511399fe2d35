"""Traffic as the plan reads it: the kinds of request from per-request rows (a traffic file's, the
calibration split's, or what the proxy served), and the proxy's window of the last minutes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from draftgate.policy import law
from draftgate.policy.plan.model import Kind, Traffic


def kinds_from(rows: Sequence[Mapping[str, float | str]], samples: int = 1024) -> tuple[Kind, ...]:
    """Kinds from per-request rows ``{kind, output_tokens, prefill_tokens, w_s, w_r, temperature}``; each
    kind keeps up to ``samples`` of its requests, spread evenly over the order they came in.

    The targets are held at a 1% tail, which the rare long prompts set, so a kind keeps all it can: a
    sample of 64 of 210 agent requests holds 22% prompts of over 3,500 uncached tokens where all 210
    hold 17%, and puts every pool's capacity at 2.55 requests a second where all of them put it at
    3.38. The cap bounds the plan's time on a full window (5,000 rows: 3 s for 8 GPUs, 16 s for 32,
    off the event loop)."""
    by_kind: dict[str, list[Mapping[str, float | str]]] = {}
    for row in rows:
        by_kind.setdefault(str(row["kind"]), []).append(row)
    total = len(rows)
    kinds = []
    for name, found in sorted(by_kind.items()):
        n = len(found)

        def mean(key: str, rows_: list[Mapping[str, float | str]] = found) -> float:
            return sum(float(r.get(key, 0.0) or 0.0) for r in rows_) / len(rows_)

        w_s = min(1.0, max(0.0, mean("w_s")))
        w_r = min(max(0.0, mean("w_r")), 1.0 - w_s)
        kept = [found[i * n // min(n, samples)] for i in range(min(n, samples))]
        requests = tuple((float(r["output_tokens"]), float(r.get("prefill_tokens", 0.0) or 0.0)) for r in kept)
        kinds.append(Kind(name, n / total, requests, law.ClassMix(w_s, w_r, 1.0 - w_s - w_r), mean("temperature")))
    return tuple(kinds)


class TrafficWindow:
    """The requests of the last ``seconds`` (at most ``capacity`` of them), as the plan reads traffic:
    each one's kind, its output and the prompt it brought to prefill, its S/R/F split, its temperature."""

    def __init__(self, seconds: float = 600.0, capacity: int = 5000) -> None:
        self.seconds = seconds
        self.rows: deque[tuple[float, dict[str, float | str]]] = deque(maxlen=capacity)

    def add(self, now: float, kind: str, output_tokens: float, prefill_tokens: float, w_s: float, w_r: float,
            temperature: float, model: str = "") -> None:
        self.rows.append((now, {"kind": kind, "output_tokens": output_tokens, "prefill_tokens": prefill_tokens,
                                "w_s": w_s, "w_r": w_r, "temperature": temperature, "model": model}))

    def busiest_model(self) -> str | None:
        """The model most of the window's requests named (None: none named one)."""
        counts: dict[str, int] = {}
        for _, row in self.rows:
            if row["model"]:
                counts[str(row["model"])] = counts.get(str(row["model"]), 0) + 1
        return max(sorted(counts), key=lambda m: counts[m]) if counts else None

    def traffic(self, now: float) -> Traffic | None:
        """What the window holds, its rate over the time it spans; None with fewer than two requests."""
        while self.rows and self.rows[0][0] < now - self.seconds:
            self.rows.popleft()
        if len(self.rows) < 2:
            return None
        span = max(1.0, now - self.rows[0][0])
        return Traffic(len(self.rows) / span, kinds_from([row for _, row in self.rows]))
