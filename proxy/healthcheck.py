"""The container's health check: does the proxy on this machine answer ``/health``?

``python -m draftgate.proxy.healthcheck`` exits 0 if it does, 1 if not. It asks on
``DRAFTGATE_PORT`` (8000 by default, as the image sets it), over http, or over
https when the proxy serves that (``tls_certfile``). The certificate is not
verified: the check reaches the proxy at 127.0.0.1, which a serving
certificate seldom names, and asks only whether the server answers.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.request

TIMEOUT_SECONDS = 2.0


def answers(url: str) -> bool:
    unverified = None
    if url.startswith("https:"):
        unverified = ssl.create_default_context()
        unverified.check_hostname = False
        unverified.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS, context=unverified) as response:
            return response.status == 200
    except (OSError, ValueError):  # refused, timed out, the wrong scheme for the port, an HTTP error
        return False


def main() -> int:
    port = os.environ.get("DRAFTGATE_PORT", "8000")
    healthy = any(answers(f"{scheme}://127.0.0.1:{port}/health") for scheme in ("http", "https"))
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
