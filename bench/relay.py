"""The floor under any proxy on this machine: a process that only pipes bytes.

    python -m bench.relay --to http://127.0.0.1:8001 --port 9000

``bench.bench_proxy`` drives its load through this relay as well as through
draftgate. Relayed minus direct is what one more process and two more loopback
hops cost here before a byte is parsed; draftgate's own work is what it adds
beyond the relay. Each client connection gets its own upstream connection and
bytes go both ways as they arrive, with flow control, on uvloop like the proxy.
A benchmark baseline, not a product: no HTTP, no timeouts, loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
from urllib.parse import urlsplit

import uvloop


class _Side(asyncio.Protocol):
    """One end of a relayed connection; ``peer`` is the other."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.early: list[bytes] = []  # bytes that arrived before the peer was connected
        self.connecting: asyncio.Task[None] | None = None  # held here: the loop keeps tasks only weakly

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.peer is None or self.peer.transport is None:
            self.early.append(data)
        else:
            self.peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    # our transport's buffer is full: stop reading from the other side until it drains
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


async def serve(port: int, host: str, target_port: int) -> None:
    loop = asyncio.get_running_loop()

    def accepted() -> _Side:
        client = _Side()

        async def connect() -> None:
            try:
                _, upstream = await loop.create_connection(_Side, host, target_port)
            except OSError:
                if client.transport is not None:
                    client.transport.close()
                return
            upstream.peer, client.peer = client, upstream
            assert upstream.transport is not None
            for data in client.early:
                upstream.transport.write(data)
            client.early.clear()

        client.connecting = loop.create_task(connect())
        return client

    server = await loop.create_server(accepted, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--to", required=True, help="upstream URL, http://host:port")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    target = urlsplit(args.to)
    uvloop.run(serve(args.port, target.hostname or "127.0.0.1", target.port or 80))


if __name__ == "__main__":
    main()
