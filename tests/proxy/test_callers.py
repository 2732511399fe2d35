"""Control per request and per key: ``x-draftgate-mode`` (or ``draftgate_mode`` in the
body) forces or frees the gate for one request, where the key allows it; a key's
own mode, latency targets and label. Real servers: the proxy under uvicorn in
front of emulated pools."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from draftgate.policy.gate import GatePolicy
from draftgate.proxy.auth import matching_key
from draftgate.proxy.callers import Caller
from draftgate.proxy.config import ApiKey, ConfigError, load_settings
from tests.proxy_harness import stack

MODEL = "Qwen/Qwen3-32B"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CALL = {"model": MODEL, "messages": [{"role": "user", "content": "weather in Paris?"}], "tools": [WEATHER],
        "tool_choice": "required", "max_tokens": 40}
PROSE = {"model": MODEL, "messages": [{"role": "user", "content": "write a long story about the sea"}],
         "max_tokens": 40}
KEYS = [{"key": "k-free", "label": "research", "allow_mode_header": True},
        "k-plain",
        {"key": "k-off", "label": "batch", "mode": "always_off"}]


def post(url: str, body: dict, key: str | None = None, **headers: str) -> httpx.Response:
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60)


def test_an_open_proxy_honours_the_mode_header_and_field_from_everyone() -> None:
    with stack(41) as s:
        assert post(s.proxy.url, CALL).headers["x-draftgate-route"] == "spec-on"
        forced_off = post(s.proxy.url, CALL, **{"x-draftgate-mode": "off"})
        assert forced_off.status_code == 200 and forced_off.headers["x-draftgate-route"] == "spec-off"
        forced_on = post(s.proxy.url, PROSE, **{"x-draftgate-mode": "ON"})
        assert forced_on.headers["x-draftgate-route"] == "spec-on"
        assert s.metric("draftgate_decisions_total", reason="mode") == 2
        # a client that cannot set headers says it in the body; the pool never sees the field
        via_body = s.client.chat.completions.with_raw_response.create(**CALL, extra_body={"draftgate_mode": "off"})
        assert via_body.headers["x-draftgate-route"] == "spec-off"
        assert via_body.parse().choices[0].message.tool_calls
        forwarded = json.loads(httpx.get(f"{s.off.url}/debug/requests").json()[-1]["body"])
        assert "draftgate_mode" not in forwarded and forwarded["messages"] == CALL["messages"]
        # auto frees a model whose policy is fixed
        explained = httpx.post(f"{s.proxy.url}/draftgate/explain", json=CALL,
                               headers={"x-draftgate-mode": "off"}).json()
        assert explained["route"] == "spec-off" and explained["reasons"][0].startswith("the request chose mode")
        bad = post(s.proxy.url, CALL, **{"x-draftgate-mode": "fast"})
        assert bad.status_code == 400 and "must be auto, on or off" in bad.json()["error"]["message"]


def test_auto_frees_a_request_from_a_models_fixed_mode() -> None:
    with stack(42, default_policy={"mode": "always_off"}) as s:
        assert post(s.proxy.url, CALL).headers["x-draftgate-route"] == "spec-off"
        assert post(s.proxy.url, CALL, **{"x-draftgate-mode": "auto"}).headers["x-draftgate-route"] == "spec-on"


def test_keys_choose_the_mode_only_where_allowed_and_are_labelled_on_the_metrics() -> None:
    with stack(43, api_keys=KEYS) as s:
        free = post(s.proxy.url, CALL, "k-free", **{"x-draftgate-mode": "off"})
        assert free.status_code == 200 and free.headers["x-draftgate-route"] == "spec-off"
        refused = post(s.proxy.url, CALL, "k-plain", **{"x-draftgate-mode": "off"})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "mode_not_allowed"
        refused_in_body = post(s.proxy.url, {**CALL, "draftgate_mode": "on"}, "k-plain")
        assert refused_in_body.status_code == 403
        # Anthropic's clients get the refusal in Anthropic's shape
        message = {"model": MODEL, "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
        anthropic_refusal = httpx.post(f"{s.proxy.url}/v1/messages", json=message,
                                       headers={"x-api-key": "k-plain", "x-draftgate-mode": "on"})
        assert anthropic_refusal.status_code == 403
        assert anthropic_refusal.json()["error"]["type"] == "permission_error"
        # a key's own mode routes its requests; its label names them on the metrics
        batch = post(s.proxy.url, CALL, "k-off")
        assert batch.status_code == 200 and batch.headers["x-draftgate-route"] == "spec-off"
        assert post(s.proxy.url, CALL, "k-plain").headers["x-draftgate-route"] == "spec-on"
        assert s.metric("draftgate_requests_total", key="batch", route="spec-off", status="200") == 1
        assert s.metric("draftgate_requests_total", key="research", route="spec-off", status="200") == 1
        assert s.metric("draftgate_requests_total", key="", route="spec-on", status="200") == 1
        assert s.metric("draftgate_requests_total", status="403") == 3
        assert post(s.proxy.url, CALL, "k-wrong").status_code == 401
        metrics = httpx.get(f"{s.proxy.url}/metrics").text
        assert "k-off" not in metrics and "k-free" not in metrics  # labels, never keys


def test_a_key_brings_its_own_latency_targets_over_the_models() -> None:
    base = GatePolicy(mode="auto", tpot_target=0.05, ttft_target=None)
    key = ApiKey(key="k", label="chat-ui", tpot_target_ms=20, ttft_target_ms=500)
    caller = Caller(label=key.label, tpot_target=0.02, ttft_target=0.5)
    assert caller.policy(base) == GatePolicy(mode="auto", tpot_target=0.02, ttft_target=0.5)
    assert Caller().policy(base) is base
    assert Caller(mode="always_on").policy(base).mode == "always_on"
    keys = [ApiKey.model_validate(k) for k in KEYS]
    assert matching_key("k-off", keys) is keys[2] and matching_key("k-of", keys) is None
    assert matching_key(None, keys) is None


@pytest.mark.parametrize(("keys", "message"), [
    ([{"key": ""}], "a key must not be empty"),
    ([{"key": "k", "label": "has space"}], "api_keys.0.label"),
    ([{"key": "k", "mode": "sometimes"}], "api_keys.0.mode"),
    ([{"key": "k", "secret": "x"}], "api_keys.0.secret"),
])
def test_a_malformed_key_stops_startup_naming_it(keys: list, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(None, pools=[{"name": "p", "urls": ["http://127.0.0.1:1"]}], api_keys=keys)


def test_the_openai_client_sets_the_mode_per_request() -> None:
    with stack(44) as s:
        raw = s.client.chat.completions.with_raw_response.create(**PROSE, extra_headers={"x-draftgate-mode": "on"})
        assert raw.headers["x-draftgate-route"] == "spec-on"
        with pytest.raises(openai.BadRequestError):
            s.client.chat.completions.create(**PROSE, extra_headers={"x-draftgate-mode": "maybe"})
