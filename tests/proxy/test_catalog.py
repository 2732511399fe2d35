"""Which pools may serve a model: those that list it, and those whose list is unknown."""

from __future__ import annotations

import asyncio

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from draftgate.proxy.catalog import ModelCatalog
from draftgate.proxy.config import load_settings
from draftgate.proxy.pools import PoolSet
from draftgate.proxy.upstream import UpstreamClient
from draftgate.servers import ServerThread


def catalog_of(*names: str) -> ModelCatalog:
    settings = load_settings(None, pools=[{"name": n, "urls": [f"http://127.0.0.1:{9000 + i}"]}
                                          for i, n in enumerate(names)])
    return ModelCatalog(PoolSet(settings.pools, 0), client=None)  # type: ignore[arg-type]  # refresh is not called


def test_a_pool_that_has_not_listed_its_models_is_assumed_to_serve_any() -> None:
    catalog = catalog_of("a", "b", "c")
    assert catalog.pools_serving("m") is None  # no list yet: no restriction
    catalog.served_by = {"a": {"m"}, "b": {"x"}}  # c has not answered
    assert catalog.pools_serving("m") == {"a", "c"}
    assert catalog.pools_serving("x") == {"b", "c"}
    assert catalog.pools_serving(7) is None  # not a name: the gate decides alone


def test_no_restriction_when_every_pool_serves_the_model() -> None:
    catalog = catalog_of("a", "b")
    catalog.served_by = {"a": {"m", "lora-1"}, "b": {"m"}}
    assert catalog.pools_serving("m") is None
    assert catalog.pools_serving("lora-1") == {"a"}


def test_answers_follow_a_refresh_and_a_reload() -> None:
    catalog = catalog_of("a", "b")
    catalog.known, catalog.served_by = {"m"}, {"a": {"m"}, "b": set()}
    assert catalog.pools_serving("m") == {"a"}
    added = load_settings(None, pools=[{"name": "c", "urls": ["http://127.0.0.1:9100"]}]).pools
    catalog.pools.adopt([p.config for p in catalog.pools] + added)  # a reload adds pool c, not yet listed
    assert catalog.pools_serving("m") == {"a", "c"}
    catalog.served_by = {"a": {"m"}, "b": {"m"}, "c": {"m"}}  # a refresh: all list it now
    assert catalog.pools_serving("m") is None


def test_each_models_context_is_the_shortest_a_pool_lists_and_an_adapter_has_its_bases() -> None:
    """Read from real /v1/models answers: vLLM lists max_model_len for its model and none
    for a LoRA adapter, whose parent names the model it runs on."""
    def pool(*entries: dict[str, object]) -> Starlette:
        async def models(request: Request) -> JSONResponse:
            return JSONResponse({"object": "list", "data": list(entries)})
        return Starlette(routes=[Route("/v1/models", models)])

    base = {"id": "m", "object": "model", "parent": None}
    adapter = {"id": "sql-lora", "object": "model", "root": "/adapters/sql", "parent": "m"}
    with ServerThread(pool({**base, "max_model_len": 32768}, adapter)) as a, \
            ServerThread(pool({**base, "max_model_len": 16384}, {"id": "odd", "max_model_len": "long"})) as b:
        settings = load_settings(None, pools=[{"name": "a", "urls": [a.url]}, {"name": "b", "urls": [b.url]}])

        async def refreshed() -> ModelCatalog:
            client = UpstreamClient()
            catalog = ModelCatalog(PoolSet(settings.pools, 0), client)
            await catalog.refresh()
            client.close()
            return catalog

        catalog = asyncio.run(refreshed())
    assert catalog.context_of("m") == 16384  # the gate weighs a request before it picks the pool
    assert catalog.context_of("sql-lora") == 16384
    assert catalog.context_of("odd") is None and catalog.context_of("unknown") is None
    assert catalog.context_of(None) == catalog.context_of("") == 16384  # vLLM serves its own model then
