"""Stored responses (/v1/responses with vLLM's store on) live on the replica that
made them: retrievals, cancels and follow-ups must reach it, through the proxy
as directly. Real servers: the proxy under uvicorn, emulated pools with the store."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import openai
import pytest

from draftgate.proxy.app import create_app
from draftgate.proxy.config import PoolConfig, load_settings
from draftgate.proxy.pools import Pool
from draftgate.proxy.stored_responses import (
    ResponseHolders,
    continued_response_id,
    stored_response_id,
)
from draftgate.servers import ServerProcess, ServerThread
from tests.conftest import emulator
from tests.proxy_harness import hold_answer_readings, metric_value, proxy_server

MODEL = "Qwen/Qwen3-32B"


@dataclass
class Replicated:
    proxy: ServerThread
    plain: list[ServerThread]
    holders: ResponseHolders  # the proxy's own table

    def post(self, path: str, **body: object) -> httpx.Response:
        return httpx.post(f"{self.proxy.url}{path}", json={"model": MODEL, **body}, timeout=60)


@contextlib.contextmanager
def replicated(gate_responses: bool = False, **overrides: object) -> Iterator[Replicated]:
    """A speculation pool of one replica and a plain pool of two, every one storing responses."""
    # slow enough that concurrent requests overlap, and so spread over both plain replicas
    with emulator(7, True, responses_store=True, time_scale=0.2) as on, \
            emulator(7, False, responses_store=True, time_scale=0.2) as a, \
            emulator(7, False, responses_store=True, time_scale=0.2) as b:
        settings = load_settings(None, pools=[{"name": "spec-on", "urls": [on.url], "speculation": {"gamma": 8}},
                                              {"name": "spec-off", "urls": [a.url, b.url]}],
                                 health={"interval": 0.2, "scrape_interval": 0.3}, log_requests=False,
                                 exploration_share=0.0,  # prose goes to the plain pool, every time
                                 # the emulators think only when asked, and the proxy knows it
                                 structure_priors={"thinking_by_default": False},
                                 gate_responses=gate_responses, **overrides)
        app = create_app(settings)
        with proxy_server(app) as proxy:
            yield Replicated(proxy, [a, b], app.state.proxy.holders)


def holder_of(stack: Replicated, rid: str) -> ServerThread:
    found = [s for s in stack.plain if httpx.get(f"{s.url}/v1/responses/{rid}").status_code == 200]
    assert len(found) == 1, rid
    return found[0]


def test_retrievals_and_follow_ups_reach_the_replica_that_stored_the_response() -> None:
    with replicated() as stack:
        with ThreadPoolExecutor(8) as pool:
            created = list(pool.map(lambda i: stack.post("/v1/responses", input=f"story {i}", max_output_tokens=40),
                                    range(8)))
        assert all(r.status_code == 200 for r in created), [r.text for r in created]
        ids = [r.json()["id"] for r in created]
        # load spread them: were every request sent to one replica, this test would prove nothing
        assert len({holder_of(stack, rid).url for rid in ids}) == 2
        for rid in ids:
            through = httpx.get(f"{stack.proxy.url}/v1/responses/{rid}")
            direct = httpx.get(f"{holder_of(stack, rid).url}/v1/responses/{rid}")
            assert through.status_code == 200, through.text
            assert through.json() == direct.json()
        with ThreadPoolExecutor(8) as pool:
            follow = list(pool.map(lambda rid: stack.post("/v1/responses", input="and then?", previous_response_id=rid,
                                                          max_output_tokens=20), ids))
        assert [r.status_code for r in follow] == [200] * 8, [r.text for r in follow if r.status_code != 200]
        for rid, answer in zip(ids, follow):
            assert holder_of(stack, answer.json()["id"]).url == holder_of(stack, rid).url


@pytest.mark.parametrize("gated", [False, True], ids=["passed-through", "gated"])
def test_a_stream_teaches_the_proxy_its_holder(gated: bool) -> None:
    """From its first event, passed through or gated: before the client has the id."""
    with replicated(gated) as stack:
        client = openai.OpenAI(base_url=f"{stack.proxy.url}/v1", api_key="x", max_retries=0)
        with ThreadPoolExecutor(6) as pool:
            def streamed(i: int) -> str:
                events = list(client.responses.create(model=MODEL, input=f"tell {i}", max_output_tokens=30,
                                                      stream=True))
                assert events[0].type == "response.created" and events[-1].type in (
                    "response.completed", "response.incomplete")
                return events[0].response.id
            ids = list(pool.map(streamed, range(6)))
        assert len({holder_of(stack, rid).url for rid in ids}) == 2
        # learned from the streams themselves, not looked up afterwards
        assert len(stack.holders) == 6
        # a response the client asked not to store is not remembered either
        unstored = stack.post("/v1/responses", input="forget me", max_output_tokens=5, store=False)
        assert unstored.status_code == 200 and len(stack.holders) == 6
        for rid in ids:
            again = client.responses.retrieve(rid)
            assert again.id == rid and again.status in ("completed", "incomplete")
            assert again.output[0].content[0].text


def test_a_gated_answer_names_its_holder_before_the_client_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy reads an answer after it has gone (0.1-0.2 s at 10 MB with logprobs);
    its holder is noted before, so a follow-up sent the moment the id arrives goes
    straight to the replica that has the response."""
    reading = hold_answer_readings(monkeypatch)
    with replicated(gate_responses=True) as stack:
        try:
            whole = stack.post("/v1/responses", input="a story", max_output_tokens=20)
            assert whole.status_code == 200 and whole.headers["x-draftgate-route"] == "spec-off"
            client = openai.OpenAI(base_url=f"{stack.proxy.url}/v1", api_key="x", max_retries=0)
            streamed = list(client.responses.create(model=MODEL, input="another", max_output_tokens=20, stream=True))
            assert len(stack.holders) == 2  # with neither answer read yet
        finally:
            reading.set()
        for rid in (whole.json()["id"], streamed[0].response.id):
            assert httpx.get(f"{stack.proxy.url}/v1/responses/{rid}").status_code == 200
        # a follow-up goes where its response is, ungated, and is counted as such
        follow = stack.post("/v1/responses", input="more", previous_response_id=whole.json()["id"],
                            max_output_tokens=5)
        assert follow.status_code == 200 and "x-draftgate-predicted-saving" not in follow.headers
        metrics = httpx.get(f"{stack.proxy.url}/metrics").text
        assert metric_value(metrics, "draftgate_passed_through_total", endpoint="responses",
                            reason="continues_stored_response") == 1


def test_responses_the_proxy_never_saw_are_found_by_asking_each_replica() -> None:
    """Another proxy replica passed the answer on, or this one restarted."""
    with replicated() as stack:
        b = stack.plain[1]
        made = httpx.post(f"{b.url}/v1/responses", json={"model": MODEL, "input": "hello", "background": True,
                                                         "max_output_tokens": 400}).json()
        assert made["status"] == "queued" and len(stack.holders) == 0
        cancelled = httpx.post(f"{stack.proxy.url}/v1/responses/{made['id']}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "cancelled"
        assert httpx.get(f"{b.url}/v1/responses/{made['id']}").json()["status"] == "cancelled"
        follow = stack.post("/v1/responses", input="more", previous_response_id=made["id"], max_output_tokens=5)
        assert follow.status_code == 200, follow.text
        missing = httpx.get(f"{stack.proxy.url}/v1/responses/resp_nobody_has_this")
        assert missing.status_code == 404
        assert missing.json()["error"]["message"] == "Response with id 'resp_nobody_has_this' not found."


def test_a_streamed_retrieval_is_relayed_and_timed_as_a_stream() -> None:
    """``GET /v1/responses/{id}?stream=true`` replays a response event by event, as
    long as it runs: each event is due within first_byte_timeout, not within the
    hour an answer sent whole may take, so a stalled holder is reported in time."""
    with replicated(timeouts={"first_byte": 0.5, "answer": 60}) as stack:
        made = stack.post("/v1/responses", input="run on", background=True, max_output_tokens=30).json()
        url = f"{stack.proxy.url}/v1/responses/{made['id']}"
        replay = httpx.get(url, params={"stream": "true", "starting_after": "1"}, timeout=30)
        assert replay.status_code == 200 and replay.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in replay.text.splitlines() if line.startswith("data: ")]
        assert events[0]["sequence_number"] == 2  # the query reached the holder whole
        assert events[-1]["type"] in ("response.completed", "response.incomplete")
        assert events[-1]["response"]["id"] == made["id"]
        httpx.post(f"{holder_of(stack, made['id']).url}/debug/faults", json={"first_byte_delay": 5.0})
        started = time.monotonic()
        stalled = httpx.get(url, params={"stream": "true"}, timeout=30)
        assert stalled.status_code == 504, stalled.text
        assert time.monotonic() - started < 3.0
        assert httpx.get(url, timeout=30).status_code == 200  # sent whole, the answer has its own, longer, time


def test_a_running_background_response_streams_as_it_runs() -> None:
    """As vLLM does: what it has made so far, then each event as it comes. The first text
    arrives while the response still runs, and the deltas rebuild the text it ends with."""
    with replicated(timeouts={"first_byte": 0.5}) as stack:
        made = stack.post("/v1/responses", input="tell me a long story", background=True,
                          max_output_tokens=400, temperature=0).json()
        url = f"{stack.proxy.url}/v1/responses/{made['id']}"
        deltas: list[str] = []
        status_at_first_delta = None
        with httpx.stream("GET", url, params={"stream": "true"}, timeout=60) as replay:
            for line in replay.iter_lines():
                if not line.startswith("data: "):
                    continue
                last = json.loads(line[6:])
                if last["type"] == "response.output_text.delta":
                    if status_at_first_delta is None:
                        status_at_first_delta = httpx.get(url, timeout=30).json()["status"]
                    deltas.append(last["delta"])
        assert status_at_first_delta == "in_progress"
        assert last["type"] in ("response.completed", "response.incomplete")
        assert "".join(deltas) == last["response"]["output"][-1]["content"][0]["text"] != ""


def test_a_holder_that_is_down_answers_for_its_response_and_no_other_replica_is_asked() -> None:
    with replicated() as stack:
        made = stack.post("/v1/responses", input="keep me", max_output_tokens=5).json()
        holder = holder_of(stack, made["id"])
        holder.__exit__(None, None, None)  # the replica is gone, and the response with it
        answer = httpx.get(f"{stack.proxy.url}/v1/responses/{made['id']}")
        # the one replica that had it is gone: a 502 says so, where a 404 from another would mislead
        assert answer.status_code == 502, answer.text
        assert answer.json()["error"]["message"].startswith("no pool could serve the request")


def test_draftgate_emulate_stores_responses_when_its_environment_says_so_as_vllm_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for flag, status in (("1", 200), ("0", 404)):
        monkeypatch.setenv("VLLM_ENABLE_RESPONSES_API_STORE", flag)
        with ServerProcess(["emulate", "--time-scale", "0.02"]) as server:
            made = httpx.post(f"{server.url}/v1/responses", json={"input": "hi", "max_output_tokens": 5}).json()
            assert httpx.get(f"{server.url}/v1/responses/{made['id']}").status_code == status


# ------------------------------------------------------------------ units


def test_the_response_an_id_path_or_a_body_is_about() -> None:
    assert stored_response_id("/v1/responses/resp_1") == "resp_1"
    assert stored_response_id("/v1/responses/resp_1/cancel") == "resp_1"
    assert stored_response_id("/v1/responses/a%2Fb/cancel") == "a/b"  # the raw path: %2F is no separator
    assert stored_response_id("/v1/responses") is None
    assert stored_response_id("/v1/responses/") is None
    assert stored_response_id("/v1/chat/completions") is None
    assert continued_response_id({"previous_response_id": "resp_2"}) == "resp_2"
    assert continued_response_id({"previous_response_id": 3}) is None
    assert continued_response_id([]) is None


@pytest.mark.parametrize("head", [
    b'{"id":"resp_9","created_at":1,"output":[{"id":"msg_9"}]}',
    b'event: response.created\ndata: {"response":{"id": "resp_9","output":[]},"sequence_number":0}\n\n',
])
def test_the_holder_is_remembered_from_the_start_of_either_answer(head: bytes) -> None:
    holders = ResponseHolders(4)
    pool = Pool(PoolConfig(name="plain", urls=["http://127.0.0.1:1"]))
    assert holders.remember_from_answer(head[:5], "plain", "http://127.0.0.1:1") is False
    assert holders.remember_from_answer(head, "plain", "http://127.0.0.1:1") is True
    found = holders.holder("resp_9", [pool])
    assert found is not None and found[1].url == "http://127.0.0.1:1"


def test_holders_are_bounded_and_forget_replicas_that_left() -> None:
    holders = ResponseHolders(3)
    pool = Pool(PoolConfig(name="plain", urls=["http://127.0.0.1:1"]))
    for i in range(5):
        holders.remember(f"resp_{i}", "plain", "http://127.0.0.1:1")
    assert len(holders) == 3
    assert holders.holder("resp_0", [pool]) is None and holders.holder("resp_4", [pool]) is not None
    holders.remember("resp_x", "plain", "http://127.0.0.1:2")  # a replica since removed from the pool
    assert holders.holder("resp_4", []) is None and len(holders) == 3  # not among these pools: kept
    assert holders.holder("resp_x", [pool]) is None
    assert len(holders) == 2  # resp_x is forgotten: the response went with its replica
