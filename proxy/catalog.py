"""Which models the pools serve: the union of their ``/v1/models``.

The proxy refuses a request for a model no pool serves with the 404 vLLM would
give, without sending it anywhere. The list is read from one healthy replica
per pool, again when a request names a model not on it (at most every few
seconds: names come from clients), and while no pool has answered, every
model is admitted, so a proxy that starts before its pools still forwards.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from proxy.pools import PoolSet
from proxy.request_body import BadRequest

REFRESH_AFTER_SECONDS = 5.0


class ModelCatalog:
    def __init__(self, pools: PoolSet, client: httpx.AsyncClient) -> None:
        self.pools = pools
        self.client = client
        self.known: set[str] = set()
        self.checked_at = 0.0

    async def check(self, body: dict[str, Any]) -> None:
        """Raise a 404 BadRequest if no pool serves the model ``body`` names."""
        model = body.get("model")
        if not isinstance(model, str):
            return
        if model not in self.known and time.monotonic() - self.checked_at > REFRESH_AFTER_SECONDS:
            await self.refresh()
        if self.known and model not in self.known:
            raise BadRequest(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")

    async def refresh(self) -> list[dict[str, Any]]:
        """The pools' model entries, merged by id (the first pool to list one wins)."""
        self.checked_at = time.monotonic()
        merged: dict[str, dict[str, Any]] = {}

        async def fetch(url: str) -> list[dict[str, Any]]:
            response = await self.client.get(f"{url}/v1/models", timeout=3.0)
            data = response.json().get("data", []) if response.status_code == 200 else []
            return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]

        urls = [r.url for pool in self.pools for r in pool.healthy_replicas()[:1]]
        results = await asyncio.gather(*(fetch(u) for u in urls), return_exceptions=True)
        for result in results:
            if isinstance(result, list):
                for entry in result:
                    merged.setdefault(entry["id"], entry)
        if merged:
            self.known = set(merged)
        return list(merged.values())
