"""vLLM's Prometheus exposition, read the way both the proxy's monitor and calibration need it.

Both sides scrape vLLM's ``/metrics``: the proxy for each replica's load and
acceptance, ``draftgate calibrate`` for what a protocol arm did. The parser is
here so that neither reaches into the other.
"""

from __future__ import annotations

import math

# vLLM series draftgate reads, summed over label sets
SCRAPED = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
    "vllm:generation_tokens": "generation_tokens",
    "vllm:prefix_cache_queries": "prefix_cache_queries",
    "vllm:prefix_cache_hits": "prefix_cache_hits",
}
# One counter per draft position, from the server's start: their number is its
# num_speculative_tokens. Read as ``speculative_tokens``; a server that does not
# speculate has none of the spec_decode series.
_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def parse_vllm_metrics(text: str) -> dict[str, float]:
    """Sum the samples of the series in SCRAPED; every other line is skipped unread.

    A full parser (prometheus_client's) took 7 ms for the emulator's 16 KB
    exposition, all of it on the event loop that serves requests, and a real
    vLLM exposition carries more histograms still. Only the few lines named
    here, and the per-position counters for the depth, are looked at.
    Counters are exposed as ``<name>_total``; ``_created`` samples are
    timestamps, not values.
    """
    values: dict[str, float] = {}
    for line in text.split("\n"):
        if not line.startswith("vllm:"):
            continue
        brace = line.find("{")
        if brace >= 0:
            name, rest = line[:brace], line[line.rfind("}") + 1:]
        else:
            name, _, rest = line.partition(" ")
        if name.endswith("_total"):
            name = name[:-6]
        if name == _PER_POSITION and brace >= 0:
            position = _label(line[brace:], "position")
            if position is not None and position.isdigit():
                values["speculative_tokens"] = max(values.get("speculative_tokens", 0.0), int(position) + 1.0)
            continue
        key = SCRAPED.get(name)
        if key is None:
            continue
        fields = rest.split()
        if not fields:
            raise ValueError(f"metric line without a value: {line[:80]!r}")
        value = float(fields[0])
        if not math.isfinite(value):  # one NaN would poison every cost worked out from this pool's load
            continue
        values[key] = values.get(key, 0.0) + value
    return values


def _label(labels: str, name: str) -> str | None:
    """The value of label ``name`` in a sample's ``{...}``; the values read here hold no quotes."""
    start = max(labels.find(f'{{{name}="'), labels.find(f',{name}="'))
    if start < 0:
        return None
    start += len(name) + 3
    end = labels.find('"', start)
    return labels[start:end] if end >= 0 else None
