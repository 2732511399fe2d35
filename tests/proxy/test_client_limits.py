"""A client that stalls mid-request, or sends a head too large, is cut off; one
that is merely slow is served.

Raw sockets against the proxy under uvicorn, because what is tested is what
happens below any HTTP client: a head or a body that stops arriving, a head
that does not stop.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.proxy_harness import Stack, stack

HEAD_TIMEOUT, BODY_TIMEOUT, MAX_HEAD = 0.5, 0.6, 16 * 1024
CHAT = json.dumps({"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "hi"}],
                   "max_tokens": 4}).encode()


@pytest.fixture(scope="module")
def proxy() -> Iterator[Stack]:
    with stack(timeouts={"client_header": HEAD_TIMEOUT, "client_body": BODY_TIMEOUT}, max_head_bytes=MAX_HEAD) as s:
        yield s


def exchange(s: Stack, *pieces: tuple[float, bytes], patience: float = 10.0) -> tuple[bytes, float]:
    """Send each piece after its pause, then read until the proxy closes the connection.

    Returns what came back and the seconds from the last piece sent to the close.
    """
    with socket.create_connection(("127.0.0.1", s.proxy.port)) as sock:
        for pause, data in pieces:
            time.sleep(pause)
            sock.sendall(data)
        sent = time.monotonic()
        sock.settimeout(patience)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received, time.monotonic() - sent


def chat_head(length: int, path: bytes = b"/v1/chat/completions") -> bytes:
    return (b"POST " + path + b" HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % length)


def error_of(answer: bytes) -> tuple[int, dict[str, str], dict]:  # type: ignore[type-arg]
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(proxy: Stack) -> None:
    answer, waited = exchange(proxy)
    assert answer == b""  # a client may have just written a request on it: no answer it could take for one
    assert waited < HEAD_TIMEOUT + 3


def test_a_half_sent_head_is_answered_408_and_closed(proxy: Stack) -> None:
    answer, waited = exchange(proxy, (0, b"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\n"))
    status, headers, error = error_of(answer)
    assert status == 408 and headers["connection"] == "close"
    assert error["error"]["type"] == "invalid_request_error" and "head" in error["error"]["message"]
    assert waited < HEAD_TIMEOUT + 3


def test_a_head_sent_in_pieces_within_the_deadline_is_served(proxy: Stack) -> None:
    head = chat_head(len(CHAT)).replace(b"content-type", b"connection: close\r\ncontent-type")
    answer, _ = exchange(proxy, (0, head[:20]), (0.15, head[20:60]), (0.15, head[60:]), (0, CHAT))
    assert answer.startswith(b"HTTP/1.1 200")


def test_a_kept_alive_connection_that_begins_a_head_and_stalls_gets_408(proxy: Stack) -> None:
    health = b"GET /health HTTP/1.1\r\nhost: proxy\r\n\r\n"
    answer, _ = exchange(proxy, (0, health), (0.2, b"POST /v1/chat/comp"))
    first, _, second = answer.partition(b"HTTP/1.1 408")
    assert first.startswith(b"HTTP/1.1 200") and b'"status":"ok"' in first
    assert second, "the stalled second head got no 408"


def test_a_head_over_the_limit_is_answered_431_and_the_proxy_keeps_serving(proxy: Stack) -> None:
    """uvicorn takes a head of any size: a client could exhaust the proxy's memory with one header."""
    answer, _ = exchange(proxy, (0, b"GET /health HTTP/1.1\r\nhost: proxy\r\nx-big: " + b"a" * (MAX_HEAD + 8192)))
    status, headers, error = error_of(answer)
    assert status == 431 and headers["connection"] == "close"
    assert error["error"]["type"] == "invalid_request_error" and str(MAX_HEAD) in error["error"]["message"]
    assert httpx.get(f"{proxy.proxy.url}/health").status_code == 200


def test_a_head_under_the_limit_sent_in_pieces_is_served(proxy: Stack) -> None:
    head = b"GET /health HTTP/1.1\r\nhost: proxy\r\nconnection: close\r\nx-big: " + b"a" * (MAX_HEAD - 2048)
    answer, _ = exchange(proxy, (0, head[:5000]), (0.05, head[5000:10000]), (0.05, head[10000:] + b"\r\n\r\n"))
    assert answer.startswith(b"HTTP/1.1 200")


def test_an_idle_kept_alive_connection_outlives_uvicorns_five_seconds(proxy: Stack) -> None:
    """Clients and load balancers keep idle connections for a minute and reuse them. A
    server that closes one first (uvicorn's default: after 5 s) can close it just as a
    request goes out on it, and that request fails; the proxy leaves the closing to them."""
    health = b"GET /health HTTP/1.1\r\nhost: proxy\r\n\r\n"
    with socket.create_connection(("127.0.0.1", proxy.proxy.port)) as sock:
        sock.settimeout(10)
        for pause in (0.0, 5.5):
            time.sleep(pause)
            sock.sendall(health)
            answer = b""
            while b'"status":"ok"' not in answer:
                chunk = sock.recv(4096)
                assert chunk, f"the proxy closed the connection after {pause} s idle"
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("path", [b"/v1/chat/completions", b"/v1/embeddings"], ids=["gated", "passed-through"])
def test_a_stalled_body_is_answered_408_and_the_proxy_keeps_serving(proxy: Stack, path: bytes) -> None:
    before = proxy.metric("draftgate_requests_total", status="408")
    answer, waited = exchange(proxy, (0, chat_head(len(CHAT), path) + CHAT[:10]))
    status, headers, error = error_of(answer)
    assert status == 408 and headers["connection"] == "close"
    assert "body paused" in error["error"]["message"]
    assert waited < BODY_TIMEOUT + 3
    if path == b"/v1/chat/completions":  # a passed-through request is counted by its upstream answer only
        assert proxy.metric("draftgate_requests_total", status="408") == before + 1
    served = httpx.post(f"{proxy.proxy.url}/v1/chat/completions", content=CHAT,
                        headers={"content-type": "application/json"}, timeout=30)
    assert served.status_code == 200


def test_a_slow_body_that_keeps_coming_is_served(proxy: Stack) -> None:
    """The pause is between reads: a body that takes longer in all than the timeout still arrives."""
    head = chat_head(len(CHAT)).replace(b"content-type", b"connection: close\r\ncontent-type")
    quarter = len(CHAT) // 4
    pieces = [(0.0, head)] + [(0.3, CHAT[i * quarter:(i + 1) * quarter if i < 3 else None]) for i in range(4)]
    started = time.monotonic()
    answer, _ = exchange(proxy, *pieces)
    assert time.monotonic() - started > BODY_TIMEOUT * 1.5
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert b"x-draftgate-route:" in answer
