"""Operating the proxy: client keys, CORS, passed-through answers, the log, failures inside the
proxy, and the bounds on what clients can grow."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
import pytest
import yaml

from draftgate.proxy.app import create_app
from draftgate.proxy.metrics import (
    MAX_MODEL_LABEL_CHARS,
    MAX_MODEL_LABELS,
    OTHER_MODELS,
)
from draftgate.servers import ServerProcess, free_port
from tests.conftest import emulator
from tests.proxy_harness import (
    metric_value,
    proxy_server,
    proxy_settings,
    stack,
    wait_until,
)

MODEL = "Qwen/Qwen3-32B"
USER = [{"role": "user", "content": "hello"}]


def test_api_keys_and_upstream_key() -> None:
    with stack(24, api_keys=["client-key"]) as st:
        r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json={"model": MODEL, "messages": USER})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json={"model": MODEL, "messages": USER, "max_tokens": 2},
                       headers={"authorization": "Bearer client-key"})
        assert r.status_code == 200
        backend = st.on.url if r.headers["x-draftgate-route"] == "spec-on" else st.off.url
        seen = httpx.get(f"{backend}/debug/requests").json()[-1]
        assert "authorization" not in seen["headers"]  # the proxy's key is not the backend's
        # every /v1 route is guarded, as vLLM guards them with its own key
        for path in ("/v1/models", "/v1/embeddings"):
            refused = httpx.request("GET" if path == "/v1/models" else "POST", f"{st.proxy.url}{path}", json={})
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key", path
        models = httpx.get(f"{st.proxy.url}/v1/models", headers={"authorization": "Bearer client-key"})
        assert models.status_code == 200 and [m["id"] for m in models.json()["data"]] == [MODEL]
        # a path that names no route is refused for want of a key before it is found wanting
        with httpx.Client() as client:
            for headers, status in (({}, 401), ({"authorization": "Bearer client-key"}, 404)):
                dotted = client.build_request("POST", f"{st.proxy.url}/", json={}, extensions={"target": b"/v1/../x"},
                                              headers=headers)
                assert client.send(dotted).status_code == status, headers


def test_a_browsers_cors_preflight_is_answered_as_the_pool_answers_it() -> None:
    """vLLM answers CORS preflights as its --allowed-origins say. A browser client of
    the proxy must get the same answer, though its preflight carries no API key."""
    origin = {"origin": "https://agent.example"}
    preflight = {**origin, "access-control-request-method": "POST",
                 "access-control-request-headers": "authorization, content-type"}

    def cors(r: httpx.Response) -> dict[str, str]:
        return {k: v for k, v in r.headers.items() if k.startswith("access-control-")}

    with stack(27, api_keys=["client-key"]) as st:
        for path in ("/v1/chat/completions", "/v1/models"):
            via = httpx.options(f"{st.proxy.url}{path}", headers=preflight)
            direct = httpx.options(f"{st.off.url}{path}", headers=preflight)
            assert via.status_code == direct.status_code == 200, (path, via.text)
            assert cors(via) == cors(direct) and cors(via)["access-control-allow-origin"] == "*", path
        body = {"model": MODEL, "messages": USER, "max_tokens": 2}
        answer = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body,
                            headers={**origin, "authorization": "Bearer client-key"})
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == "*"
        # the preflight needs no key; the request it clears still does
        assert httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body, headers=origin).status_code == 401


def test_answers_the_proxy_makes_itself_carry_cors_headers_as_vllms_do() -> None:
    """The merged model list, a 400 or a 401 never come from a pool, so a pool's
    CORS headers cannot come with them. Without their own, a browser could not list
    models and would see every proxy-made error as a CORS failure."""
    origin = {"origin": "https://agent.example"}
    key = {"authorization": "Bearer client-key"}

    def allow_origin(r: httpx.Response) -> list[str]:
        return r.headers.get_list("access-control-allow-origin")

    with stack(37, api_keys=["client-key"]) as st:
        via = httpx.get(f"{st.proxy.url}/v1/models", headers={**origin, **key})
        direct = httpx.get(f"{st.off.url}/v1/models", headers=origin)
        assert via.status_code == direct.status_code == 200
        assert allow_origin(via) == allow_origin(direct) == ["*"]
        malformed = httpx.post(f"{st.proxy.url}/v1/chat/completions", content=b"{", headers={**origin, **key,
                                                                                             "content-type": "application/json"})
        assert malformed.status_code == 400 and allow_origin(malformed) == ["*"]
        assert allow_origin(httpx.get(f"{st.proxy.url}/v1/models", headers=origin)) == ["*"]  # the 401
        # a pool's own answer keeps its header, not a second one
        body = {"model": MODEL, "messages": USER, "max_tokens": 2}
        answer = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body, headers={**origin, **key})
        assert answer.status_code == 200 and allow_origin(answer) == ["*"]
        # clients that are not browsers send no Origin and get no CORS headers
        plain = httpx.get(f"{st.proxy.url}/v1/models", headers=key)
        assert not [k for k in plain.headers if k.startswith("access-control-")]

    with stack(38, cors={"allowed_origins": ["https://agent.example"], "allow_credentials": True}) as st:
        listed = httpx.get(f"{st.proxy.url}/v1/models", headers=origin)
        assert allow_origin(listed) == ["https://agent.example"]  # named: "*" is refused with credentials
        assert listed.headers["access-control-allow-credentials"] == "true" and "Origin" in listed.headers["vary"]
        stranger = httpx.get(f"{st.proxy.url}/v1/models", headers={"origin": "https://elsewhere.example"})
        assert stranger.status_code == 200 and not allow_origin(stranger)


def test_a_passed_through_answer_cut_midway_is_cut_for_the_client_too() -> None:
    """Bytes of it have gone, so no other pool can take over; but ending it cleanly
    would hand the client a truncated body as whole. The client's connection drops,
    as a direct client's would, and the proxy says so in one JSON line, no traceback."""
    with emulator(30, True) as on, emulator(30, False) as off, \
            ServerProcess(["serve", "--spec-on", on.url, "--spec-off", off.url]) as proxy:
        httpx.post(f"{off.url}/debug/faults", json={"cut_answer_short": True})
        for url in (off.url, proxy.url):
            with pytest.raises(httpx.RemoteProtocolError):
                httpx.post(f"{url}/tokenize", json={"prompt": "How many tokens is this?"}, timeout=30)
        with socket.create_connection(("127.0.0.1", proxy.port)) as raw:  # uvicorn's own warning, too
            raw.sendall(b"NOT HTTP\r\n\r\n")
            assert raw.recv(100).startswith(b"HTTP/1.1 400")
        assert wait_until(lambda: "Invalid HTTP request" in proxy.output())
        assert metric_value(httpx.get(f"{proxy.url}/metrics").text, "draftgate_upstream_errors_total",
                            error="mid_body") == 1
        lines = proxy.output().splitlines()[1:]  # after the "serving on" banner
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    (cut,) = [r for r in records if r["message"].startswith("a passed-through answer broke midway")]
    assert cut["replica"] == off.url and cut["path"] == "/tokenize" and "before the response was complete" in cut["error"]
    assert not [r for r in records if "traceback" in r]


def test_no_key_reaches_the_log(tmp_path: Path) -> None:
    """Client keys, right or wrong, the admin token and the keys sent upstream appear
    nowhere in what the proxy prints, at its most verbose."""
    secrets = ["client-secret", "wrong-secret", "admin-secret", "wrong-admin", "upstream-one", "upstream-two"]
    with emulator(26, True) as on, emulator(26, False) as off:
        cfg = tmp_path / "draftgate.yaml"
        cfg.write_text(yaml.safe_dump({
            "pools": [{"name": "spec-on", "urls": [on.url], "speculation": {"gamma": 8}, "api_key": "upstream-one"},
                      {"name": "spec-off", "urls": [off.url], "api_key": "upstream-two"}],
            "api_keys": ["client-secret"], "admin_token": "admin-secret"}))
        with ServerProcess(["serve", "--config", str(cfg), "--log-level", "debug"]) as proxy, \
                httpx.Client(timeout=30) as h:
            statuses = [h.post(f"{proxy.url}/v1/chat/completions", headers={"authorization": f"Bearer {key}"},
                               json={"model": MODEL, "messages": USER, "max_tokens": 2}).status_code
                        for key in ("client-secret", "wrong-secret")]
            assert statuses == [200, 401]
            assert h.post(f"{proxy.url}/draftgate/reload", headers={"authorization": "Bearer wrong-admin"}
                          ).status_code == 401
            assert h.post(f"{proxy.url}/draftgate/reload", headers={"authorization": "Bearer admin-secret"}
                          ).status_code == 200
            output = proxy.output()
    assert '"event": "request"' in output  # the request log was written
    assert not [secret for secret in secrets if secret in output]


def test_a_failing_gate_or_recorder_never_costs_the_client_its_answer() -> None:
    """Bugs in weighing or recording a request are contained: the request is served
    (by a plain pool, unassessed), counted, and no replica slot is leaked."""
    with stack(11) as st:
        proxy = st.proxy.server.config.app.state.proxy

        def broken_plan(*args: object) -> None:
            raise ZeroDivisionError("a bug in the gate")

        def broken_finish(*args: object) -> None:
            raise KeyError("a bug in the recorder")

        proxy.planner.plan = broken_plan
        proxy.recorder.record = broken_finish
        tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
        with httpx.Client(timeout=30) as h:
            for stream in (False, True):
                r = h.post(f"{st.proxy.url}/v1/chat/completions",
                           json={"model": MODEL, "messages": USER, "tools": [tool], "tool_choice": "required",
                                 "temperature": 0, "stream": stream, "max_tokens": 16})
                assert r.status_code == 200 and r.headers["x-draftgate-route"] == "spec-off"
                assert "the gate failed" not in r.text  # the client sees the backend's answer, nothing else
        assert st.metric("draftgate_gate_errors_total") == 2
        assert wait_until(lambda: all(p.inflight == 0 for p in proxy.upstreams.pools))


def test_model_names_clients_type_cannot_grow_the_metrics_without_bound() -> None:
    """With no pool answering, the proxy cannot tell real model names from typos and admits
    them all; past MAX_MODEL_LABELS distinct names their series share the label "other", as
    does a name too long to be one."""
    down = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]  # nothing listens there
    with proxy_server(create_app(proxy_settings(*down))) as proxy, httpx.Client(timeout=30) as h:
        names = ["x" * (MAX_MODEL_LABEL_CHARS + 1)] + [f"typo-{i}" for i in range(MAX_MODEL_LABELS + 8)]
        for name in names:
            r = h.post(f"{proxy.url}/v1/chat/completions", json={"model": name, "messages": USER})
            assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_unavailable"
        text = h.get(f"{proxy.url}/metrics").text
    labelled = {name for name in names if metric_value(text, "draftgate_requests_total", model=name) > 0}
    assert len(labelled) == MAX_MODEL_LABELS and names[0] not in labelled
    assert metric_value(text, "draftgate_requests_total", model=OTHER_MODELS) == 9
    assert metric_value(text, "draftgate_requests_total") == len(names)
