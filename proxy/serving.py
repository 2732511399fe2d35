"""How uvicorn serves the proxy: one home for its server options, used by
``draftgate serve`` and by the tests that run the proxy in-process."""

from __future__ import annotations

from typing import Any

UVICORN_OPTIONS: dict[str, Any] = {
    "log_level": "warning",  # the proxy writes its own JSON lines
    "access_log": False,  # the request log line says more, once
    "server_header": False,
    # draftgate never reads the client's address, so X-Forwarded-* rewriting would
    # only cost time on every request
    "proxy_headers": False,
    "timeout_graceful_shutdown": 30,
}
