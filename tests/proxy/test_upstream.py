"""The hot-path HTTP client keeps connections alive, and only reuses ones that are clean."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from draftgate.proxy.upstream import Origin, UpstreamAborted, UpstreamClient, UpstreamConnectError
from tests.conftest import emulator
from tests.proxy_harness import metric_value, wait_until

HEADERS = [(b"content-type", b"application/json")]


def body(**extra: object) -> bytes:
    return json.dumps({"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "ping"}],
                       "max_tokens": 4, "temperature": 0, **extra}).encode()


def test_sequential_requests_share_one_keep_alive_connection() -> None:
    async def run(url: str) -> set[int]:
        origin = Origin(url)
        used = set()
        for stream in (False, True, False, True):
            response = await origin.request("POST", "/v1/chat/completions", HEADERS, body(stream=stream), 5, 30)
            used.add(id(response._conn))
            assert response.status_code == 200
            assert await response.aread()
            await response.aclose()
        assert len(origin.idle) == 1
        origin.close()
        return used

    with emulator(1, False) as server:
        assert len(asyncio.run(run(server.url))) == 1


def test_a_response_abandoned_midway_closes_its_connection() -> None:
    async def run(url: str) -> None:
        origin = Origin(url)
        response = await origin.request("POST", "/v1/chat/completions", HEADERS,
                                        body(stream=True, max_tokens=200), 5, 30)
        async for _ in response.aiter_raw():
            break  # the rest of the stream is still coming: this connection cannot carry another request
        first = response._conn
        await response.aclose()
        assert first.closed and not origin.idle
        again = await origin.request("POST", "/v1/chat/completions", HEADERS, body(), 5, 30)
        assert again._conn is not first and again.status_code == 200
        await again.aread()
        await again.aclose()
        origin.close()

    with emulator(2, False, time_scale=0.2) as server:
        asyncio.run(run(server.url))


def test_abort_ends_every_exchange_under_way_without_a_retry() -> None:
    """Shutdown ends what still runs: a reader waiting for headers or mid-body gets
    UpstreamAborted (what arrived before it is kept), and no connection goes back to the pool."""
    async def run(url: str) -> None:
        client = UpstreamClient()
        origin = client.origin(url)
        streaming = await origin.request("POST", "/v1/chat/completions", HEADERS,
                                         body(stream=True, max_tokens=400), 5, 30)
        chunks = [await anext(aiter(streaming.aiter_raw()))]
        waiting = asyncio.ensure_future(origin.request("POST", "/v1/chat/completions", HEADERS,
                                                       body(max_tokens=400), 5, 30))
        while len(origin.busy) < 2:
            await asyncio.sleep(0.01)
        client.abort_all(UpstreamAborted("shutting down"))
        with pytest.raises(UpstreamAborted):
            await waiting
        with pytest.raises(UpstreamAborted):
            async for chunk in streaming.aiter_raw():
                chunks.append(chunk)
        assert chunks and chunks[0].startswith(b"data: ")
        await streaming.aclose()
        assert not origin.busy and not origin.idle
        client.close()

    with emulator(3, False, time_scale=0.2) as server:
        asyncio.run(run(server.url))
        # the emulator saw both requests go (vLLM aborts a request whose connection closes)
        assert wait_until(lambda: metric_value(httpx.get(f"{server.url}/metrics").text,
                                               "vllm:num_requests_running") == 0, 5)


async def _raw_server(replies: list[bytes]) -> tuple[asyncio.base_events.Server, str]:
    """A server on loopback that answers each request on a connection with the next of
    ``replies``, bytes as given: HTTP that no well-behaved framework would write."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for reply in replies:
            if not await reader.readuntil(b"\r\n\r\n"):
                break
            writer.write(reply)
            await writer.drain()
        await reader.read()  # hold the connection until the client closes it
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def test_an_interim_response_is_skipped_and_the_real_one_read() -> None:
    """A 100 Continue or 103 Early Hints comes before the answer on the same connection.
    Taken for the answer, it left the real one to be read as the answer to the
    connection's next request: one client's completion handed to another."""
    async def run() -> None:
        server, url = await _raw_server([
            b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-answer: first\r\n\r\nfirst",
            b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecond",
        ])
        origin = Origin(url)
        for expected in (b"first", b"second"):
            response = await origin.request("GET", "/", [], b"", 5, 5)
            assert (response.status_code, await response.aread()) == (200, expected)
            assert response.headers.get("link") is None  # the interim response's headers are not the answer's
            await response.aclose()
        origin.close()
        server.close()

    asyncio.run(run())


def test_a_pooled_connection_that_receives_unasked_bytes_is_not_reused() -> None:
    async def run() -> None:
        # a second response nobody asked for follows the first
        server, url = await _raw_server([b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
                                         b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale"])
        origin = Origin(url)
        response = await origin.request("GET", "/", [], b"", 5, 5)
        assert await response.aread() == b"ok"
        await response.aclose()
        (pooled,) = origin.idle
        pooled.transport.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")  # makes the server send the stray one
        assert await _until(lambda: pooled.closed)
        again = await origin.request("GET", "/", [], b"", 5, 5)
        assert again._conn is not pooled and await again.aread() == b"ok"
        await again.aclose()
        origin.close()
        server.close()

    asyncio.run(run())


async def _until(condition, seconds: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    for _ in range(int(seconds / 0.01)):
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()


def test_what_has_arrived_is_read_as_one_piece() -> None:
    """A reader behind its server (the proxy under load) takes the backlog in one step,
    not one per chunk the server wrote; what comes later comes as it comes."""
    async def run() -> list[bytes]:
        later = asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (b"one ", b"two ", b"three "))
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunks)
            await writer.drain()
            await later.wait()
            writer.write(b"4\r\nfour\r\n0\r\n\r\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        origin = Origin(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        response = await origin.request("GET", "/", [], b"", 5, 5)
        await asyncio.sleep(0.2)  # the first three chunks are here by now
        pieces = []
        async for piece in response.aiter_raw():
            pieces.append(piece)
            later.set()
        await response.aclose()
        origin.close()
        server.close()
        return pieces

    assert asyncio.run(run()) == [b"one two three ", b"four"]


# ---------------------------------------------------------------- hardening, against raw servers


class RawServer:
    """An HTTP server written by hand on loopback, to answer as real servers may but
    vLLM rarely does; it counts the connections it accepted and those open at once."""

    def __init__(self, answer: bytes, close_after: bool = False, hold: float = 0.0) -> None:
        self.answer, self.close_after, self.hold = answer, close_after, hold
        self.accepted = 0
        self.open_now = 0
        self.most_open = 0

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            while (await reader.readuntil(b"\r\n\r\n")):
                await asyncio.sleep(self.hold)
                writer.write(self.answer)
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open_now -= 1
            writer.close()

    async def stop(self) -> None:
        self.server.close()
        await self.server.wait_closed()


KEEP_ALIVE_OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


def test_an_idle_connection_is_not_reused_past_its_expiry() -> None:
    """Servers close idle keep-alive connections (vLLM's uvicorn after 5 s); one reused
    just as the server closes it loses the request written to it. The client drops its
    idle connections before the server would."""
    async def run() -> int:
        server = RawServer(KEEP_ALIVE_OK)
        origin = Origin(await server.start(), idle_expiry=0.2)
        for pause in (0.0, 0.05, 0.4):
            await asyncio.sleep(pause)
            status, answer = await origin.get("/", [], 5)
            assert (status, answer) == (200, b"ok")
        origin.close()
        await server.stop()
        return server.accepted

    # the second request reuses the first connection; the third comes after the expiry
    assert asyncio.run(run()) == 2


def test_a_body_without_length_ends_when_the_server_closes() -> None:
    async def run() -> tuple[int, bytes, int]:
        server = RawServer(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\nuntil close",
                           close_after=True)
        origin = Origin(await server.start())
        status, answer = await origin.get("/", [], 5)
        idle = len(origin.idle)
        origin.close()
        await server.stop()
        return status, answer, idle

    assert asyncio.run(run()) == (200, b"until close", 0)  # and the closed connection is not pooled


def test_exchanges_at_once_per_origin_are_capped() -> None:
    async def run() -> tuple[int, list[int]]:
        server = RawServer(KEEP_ALIVE_OK, hold=0.2)
        origin = Origin(await server.start(), max_connections=2)
        answers = await asyncio.gather(*(origin.get("/", [], 5) for _ in range(5)))
        origin.close()
        await server.stop()
        return server.most_open, [status for status, _ in answers]

    most_open, statuses = asyncio.run(run())
    assert statuses == [200] * 5  # the others waited for a connection, none failed
    assert most_open == 2


def test_backpressure_counts_bytes_not_chunks() -> None:
    """Four 1 MiB chunks unread are 4 MiB held: the connection stops reading, though
    it has buffered only four chunks."""
    size = 1024 * 1024
    chunk = f"{size:x}\r\n".encode() + b"x" * size + b"\r\n"

    async def run() -> tuple[bool, int]:
        server = RawServer(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk * 4 + b"0\r\n\r\n")
        origin = Origin(await server.start())
        response = await origin.request("GET", "/", [], b"", 5, 5)
        await asyncio.sleep(0.3)  # the server writes all it can; nothing is read meanwhile
        paused = response._conn.paused
        body = await response.aread()
        await response.aclose()
        origin.close()
        await server.stop()
        return paused, len(body)

    paused, length = asyncio.run(run())
    assert paused
    assert length == 4 * size


def test_a_failed_connect_frees_its_slot() -> None:
    async def run() -> None:
        origin = Origin("http://127.0.0.1:9", max_connections=1)  # nothing listens on the discard port
        for _ in range(3):  # a slot kept by a failure would leave the third waiting for ever
            with pytest.raises(UpstreamConnectError):
                await origin.request("GET", "/", [], b"", 1, 1)

    asyncio.run(asyncio.wait_for(run(), 10))
