"""vLLM's Prometheus metrics, with vLLM's names and labels, in a private registry.

A private registry per server lets tests run several emulators in one process.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

disable_created_metrics()  # vLLM exports no *_created series; neither do we

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                    20.0, 40.0, 80.0)
_ITL_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2,
                0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


class EngineMetrics:
    """vLLM's series, as a server of ``model_name`` exposes them.

    ``speculative_tokens``: the server's ``num_speculative_tokens``, 0 without
    speculation. As in vLLM, the speculative series exist only on a speculating
    server, with one ``..._per_pos`` counter for each draft position from the
    start: how many there are is how deep the server drafts, before it has
    drafted anything.
    """

    def __init__(self, model_name: str, speculative_tokens: int = 0) -> None:
        self.registry = CollectorRegistry()
        labels = {"model_name": model_name, "engine": "0"}
        names = list(labels)

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, [*names, *extra], registry=self.registry)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, names, registry=self.registry).labels(**labels)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, names, buckets=buckets, registry=self.registry).labels(**labels)

        self.speculative = speculative_tokens > 0
        if self.speculative:
            self.num_drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.").labels(**labels)
            self.num_draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens."
                                            ).labels(**labels)
            self.num_accepted = counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."
                                        ).labels(**labels)
            per_pos = counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                              ("position",))
            self._per_pos = [per_pos.labels(**labels, position=str(i)) for i in range(speculative_tokens)]
        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.prefix_queries = counter("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.").labels(**labels)
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.").labels(**labels)
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.").labels(**labels)
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.").labels(**labels)
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine."
                                   ).labels(**labels)
        self._success = counter("vllm:request_success", "Count of successfully processed requests.",
                                ("finished_reason",))
        self._labels = labels
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              _LATENCY_BUCKETS)
        self.itl = histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             _ITL_BUCKETS)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             _LATENCY_BUCKETS)

    def success(self, finished_reason: str) -> None:
        self._success.labels(**self._labels, finished_reason=finished_reason).inc()

    def record_spec_step(self, draft_len: int, accepted: int) -> None:
        self.num_drafts.inc()
        self.num_draft_tokens.inc(draft_len)
        self.num_accepted.inc(accepted)
        for i in range(min(accepted, len(self._per_pos))):
            self._per_pos[i].inc()
