"""The floor under draftgate's own work: its server and its upstream client, and nothing else.

    python -m bench.passthrough --to http://127.0.0.1:8001 --port 9000

An ASGI app that forwards every request to one backend and answers with what
comes back. It runs under uvicorn with draftgate's server options
(``proxy/serving.py``), over draftgate's keep-alive client
(``proxy/upstream.py``), and answers as draftgate does: whole with a length,
or event by event for a stream. It does nothing else: no parsing, planning,
failover, metrics or log line. ``bench.bench_proxy`` drives its load through it
too. Passthrough minus relay is what a Python ASGI proxy costs on this
machine before it does any work; draftgate minus passthrough is draftgate's
own work. A benchmark baseline, not a product.
"""

from __future__ import annotations

import argparse

import uvicorn
from starlette.types import Message, Receive, Scope, Send

from draftgate.proxy.config import load_settings
from draftgate.proxy.headers import HOP_BY_HOP, downstream_headers
from draftgate.proxy.serving import uvicorn_options
from draftgate.proxy.upstream import UpstreamClient

CONNECT_TIMEOUT, READ_TIMEOUT = 2.0, 300.0


class Passthrough:
    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.client = UpstreamClient()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        query = scope["query_string"]
        target = scope["path"] + ("?" + query.decode("latin-1") if query else "")
        headers = [(k, v) for k, v in scope["headers"] if k not in HOP_BY_HOP]
        response = await self.client.origin(self.backend).request(
            scope["method"], target, headers, b"".join(chunks), CONNECT_TIMEOUT, READ_TIMEOUT)
        relayed = downstream_headers(response.headers)
        try:
            if (response.headers.get("content-type") or "").startswith("text/event-stream"):
                await send({"type": "http.response.start", "status": response.status_code, "headers": relayed})
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            else:
                body = await response.aread()
                relayed.append((b"content-length", str(len(body)).encode()))
                await send({"type": "http.response.start", "status": response.status_code, "headers": relayed})
                await send({"type": "http.response.body", "body": body})
        finally:
            await response.aclose()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message: Message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.client.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--to", required=True, help="the backend's base URL")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    served_as_draftgate = uvicorn_options(load_settings(None, pools=[{"name": "to", "urls": [args.to]}]))
    uvicorn.run(Passthrough(args.to.rstrip("/")), host="127.0.0.1", port=args.port, **served_as_draftgate)


if __name__ == "__main__":
    main()
