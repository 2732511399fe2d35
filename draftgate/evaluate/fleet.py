"""What a fleet is: pools of GPUs, each running one vLLM configuration.

A homogeneous fleet is N replicas of one configuration; the gate's fleet is
the composition its plan recommends. The evaluation runs each fleet in
simulation (``simulation.py``) behind the proxy's own balancer and planner.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from draftgate.emulator.engine import SpecConfig

DRAFT_MODEL = "Qwen/Qwen3-4B"


@dataclass(frozen=True)
class PoolSpec:
    """One pool: how its servers speculate (``method`` None: they do not) and how many GPUs it has,
    one replica each."""

    name: str
    gpus: int
    method: str | None = None
    depth: int = 0
    lookup: tuple[int, int] | None = None  # ngram's prompt_lookup_min and _max
    dynamic: tuple[tuple[int, int, int], ...] = ()  # vLLM's num_speculative_tokens_per_batch_size

    @property
    def speculative(self) -> bool:
        return self.method is not None

    def speculative_config(self) -> SpecConfig | None:
        """The pool's ``--speculative-config``, as the emulator reads it."""
        if self.method is None:
            return None
        low, high = self.lookup or (5, 5)
        return SpecConfig(self.method, self.depth, self.dynamic, DRAFT_MODEL if self.method == "draft_model" else None,
                          low, high)

    def speculative_config_json(self) -> str | None:
        """The same as ``vllm serve --speculative-config`` takes it."""
        if self.method is None:
            return None
        config: dict[str, Any] = {"method": self.method, "num_speculative_tokens": self.depth}
        if self.method == "draft_model":
            config["model"] = DRAFT_MODEL
        if self.lookup is not None:
            config["prompt_lookup_min"], config["prompt_lookup_max"] = self.lookup
        if self.dynamic:
            config["num_speculative_tokens_per_batch_size"] = [list(row) for row in self.dynamic]
        return json.dumps(config)

    def proxy_pool(self, urls: list[str], max_num_seqs: int) -> dict[str, Any]:
        """The pool as the proxy's configuration names it (``pools:`` in draftgate.yaml)."""
        pool: dict[str, Any] = {"name": self.name, "urls": urls, "max_num_seqs": max_num_seqs}
        if self.method is not None:
            speculation: dict[str, Any] = {"method": self.method, "gamma": self.depth}
            if self.lookup is not None:
                speculation["prompt_lookup_min"], speculation["prompt_lookup_max"] = self.lookup
            if self.dynamic:
                speculation["num_speculative_tokens_per_batch_size"] = [list(row) for row in self.dynamic]
            pool["speculation"] = speculation
        return pool

    @property
    def signature(self) -> tuple[Any, ...]:
        """What decides how the pool's servers draft, whatever the pool is called."""
        return self.method, self.depth, self.lookup, self.dynamic


@dataclass(frozen=True)
class Fleet:
    pools: tuple[PoolSpec, ...]

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pools)

    def composition(self) -> dict[str, int]:
        """Pool name -> GPUs."""
        return {p.name: p.gpus for p in self.pools}

    def resized(self, gpus: int) -> Fleet:
        """A homogeneous fleet's configuration on ``gpus`` GPUs."""
        if len(self.pools) != 1:
            raise ValueError("only a fleet of one configuration resizes")
        pool = self.pools[0]
        return Fleet((PoolSpec(pool.name, gpus, pool.method, pool.depth, pool.lookup, pool.dynamic),))
