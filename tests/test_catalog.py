"""Which pools may serve a model: those that list it, and those whose list is unknown."""

from __future__ import annotations

from proxy.catalog import ModelCatalog
from proxy.config import load_settings
from proxy.pools import PoolSet


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
