"""The emulator's per-request ground truth, as it travels in a response header.

Not vLLM's: what a request cost on the emulated GPU (``gpu_seconds``) and the
latencies it saw (``ttft``, ``tpot``), in simulated seconds, and its output
``tokens``. The emulator writes it on every non-streamed answer (a stream's
headers go before the work); a proxy relays it like any header; the evaluation
and the tests read it with ``read``.
"""

from __future__ import annotations

from collections.abc import Mapping

HEADER = "x-emulator-truth"


def write(values: Mapping[str, float]) -> str:
    return "; ".join(f"{k}={v:.6g}" for k, v in values.items())


def read(header: str) -> dict[str, float]:
    return {k: float(v) for k, v in (part.split("=", 1) for part in header.split("; "))}
