"""Which models the pools serve: the union of their ``/v1/models``, and which pool serves which.

The proxy refuses a request for a model no pool serves with the 404 vLLM would
give, without sending it anywhere; and it routes a request only to pools that
serve its model. Pools usually serve the same target, but one may carry a
LoRA adapter or a second model the other lacks, and the 404 it would answer
passes through to the client as any 4xx does.

Each pool's list is read from one healthy replica, again when a request names
a model not on any list (at most every few seconds: names come from clients),
and in the background once the lists are older than half a minute. A pool
whose list is unknown (it has not answered yet) is assumed to serve anything,
and while no pool has answered, every model is admitted, so a proxy that starts
before its pools still forwards.

The lists also say each model's context (``max_model_len``), which bounds how
long an answer can run: the estimate needs it when a request sets no cap.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from draftgate.proxy.headers import upstream_headers
from draftgate.proxy.pools import Pool, PoolSet
from draftgate.proxy.request_body import BadRequest
from draftgate.proxy.upstream import UpstreamClient

RETRY_UNKNOWN_AFTER_SECONDS = 5.0
REFRESH_AFTER_SECONDS = 30.0


class ModelCatalog:
    def __init__(self, pools: PoolSet, client: UpstreamClient) -> None:
        self.pools = pools
        self.client = client
        self.known: set[str] = set()
        self.served_by: dict[str, set[str]] = {}  # pool name -> the model ids it listed
        self.contexts: dict[str, int] = {}  # model id -> the shortest max_model_len a pool listed for it
        self.checked_at = 0.0
        self._background: asyncio.Task[Any] | None = None
        # pools_serving's answers per model, and the lists and pools they were worked out from
        # (refresh and a reload replace those objects, never change them in place)
        self._serving: dict[str, set[str] | None] = {}
        self._serving_lists: object = None
        self._serving_pools: object = None

    async def check(self, body: dict[str, Any]) -> None:
        """Raise a 404 BadRequest if no pool serves the model ``body`` names."""
        model = body.get("model")
        if not isinstance(model, str) or not model:  # vLLM serves an empty name as its own model
            return
        await self.keep_fresh(model)
        if self.known and model not in self.known:
            raise BadRequest(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")

    async def keep_fresh(self, model: Any) -> None:
        """Read the lists now if ``model`` is on none of them (at most every few seconds),
        or in the background once they are old."""
        age = time.monotonic() - self.checked_at
        listed = isinstance(model, str) and model in self.known
        if not listed and age > RETRY_UNKNOWN_AFTER_SECONDS:
            await self.refresh()
        elif age > REFRESH_AFTER_SECONDS and (self._background is None or self._background.done()):
            self._background = asyncio.get_running_loop().create_task(self.refresh())

    def pools_serving(self, model: Any) -> set[str] | None:
        """The pools that may serve ``model``: those that list it and those whose list
        is unknown. None when that is every pool, or the model is not a name."""
        if not isinstance(model, str) or not model or not self.served_by:
            return None
        if self.served_by is not self._serving_lists or self.pools.pools is not self._serving_pools:
            self._serving, self._serving_lists, self._serving_pools = {}, self.served_by, self.pools.pools
        elif model in self._serving:  # asked once per request: worth remembering
            return self._serving[model]
        names = {pool.name for pool in self.pools}
        serving = {name for name in names if model in self.served_by.get(name, (model,))}
        answer = serving if serving and serving != names else None
        if model in self.known:  # names clients type are not remembered, only served ones
            self._serving[model] = answer
        return answer

    def context_of(self, model: Any) -> int | None:
        """The context of ``model``, or of the pools' own model when the request names none
        (vLLM serves it then); None while no pool has said."""
        if isinstance(model, str) and model:
            return self.contexts.get(model)
        return min(self.contexts.values(), default=None)

    async def refresh(self) -> list[dict[str, Any]]:
        """The pools' model entries, merged by id (the first pool to list one wins)."""
        self.checked_at = time.monotonic()

        async def fetch(pool: Pool, url: str) -> list[dict[str, Any]]:
            # with the pool's own key, if it has one: vLLM guards /v1/models with it
            headers = upstream_headers((), pool, strip_authorization=True)
            status, body = await self.client.origin(url).get("/v1/models", headers, 3.0)
            listing = json.loads(body) if status == 200 else None
            data = listing.get("data") if isinstance(listing, dict) else None
            return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)] if isinstance(data, list) else []

        asked = [(pool, r.url) for pool in self.pools for r in pool.replicas_in_rotation()[:1]]
        results = await asyncio.gather(*(fetch(pool, url) for pool, url in asked), return_exceptions=True)
        merged: dict[str, dict[str, Any]] = {}
        served_by: dict[str, set[str]] = {}
        contexts: dict[str, int] = {}
        for (pool, _), result in zip(asked, results):
            if isinstance(result, list):
                served_by[pool.name] = {entry["id"] for entry in result}
                for entry in result:
                    merged.setdefault(entry["id"], entry)
                    length = entry.get("max_model_len")
                    # the shortest: the gate weighs a request before it picks the pool
                    if isinstance(length, int) and not isinstance(length, bool) and length > 0:
                        contexts[entry["id"]] = min(length, contexts.get(entry["id"], length))
        for model, entry in merged.items():  # vLLM lists a LoRA adapter without one: it has its base model's
            parent = entry.get("parent")
            if model not in contexts and isinstance(parent, str) and parent in contexts:
                contexts[model] = contexts[parent]
        if merged:
            self.known = set(merged)
            self.served_by = served_by
            self.contexts = contexts
        return list(merged.values())
