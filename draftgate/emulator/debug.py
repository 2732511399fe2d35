"""The emulator's debug routes, which no vLLM has: for tests and benchmarks.

``GET /debug/ground-truth`` says what the server simulated (its profile, and
the acceptance it drew per token class), against which the proxy's
measurements and the calibration are checked; ``POST /debug/faults`` sets the
faults it shows (``draftgate/emulator/faults.py``); ``GET /debug/requests`` returns
the last requests as received, for transparency tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from draftgate.emulator.faults import Faults
from draftgate.emulator.wire import error_response

if TYPE_CHECKING:
    from draftgate.emulator.app import Emulator


def debug_routes(emulator: Emulator) -> list[Route]:
    async def ground_truth(request: Request) -> JSONResponse:
        engine = emulator.get_engine()
        config = emulator.config
        return JSONResponse({
            "emulated": True,
            "speculative": config.spec is not None,
            "method": config.spec.method if config.spec else None,
            "num_speculative_tokens": config.spec.num_speculative_tokens if config.spec else 0,
            "time_scale": config.time_scale,
            "simulated_seconds": engine.simulated_seconds,
            "busy_seconds": engine.busy_seconds,
            "kv_capacity_tokens": engine.kv_capacity,
            "max_num_seqs": engine.max_num_seqs,
            "profile": config.profile.model_dump(mode="json"),
            **engine.truth.as_json(),
        })

    async def set_faults(request: Request) -> JSONResponse:
        try:
            update = await request.json()
            emulator.faults = Faults.model_validate({**emulator.faults.model_dump(), **update})
        except Exception as exc:  # noqa: BLE001 - any bad fault spec is the caller's error
            return error_response(f"invalid faults: {exc}", 400)
        if emulator.faults.refuse_connections:
            if emulator.refuse_hook is None:
                return error_response("refuse_connections needs the server started by draftgate emulate", 400)
            emulator.refuse_hook()
        return JSONResponse(emulator.faults.model_dump())

    async def last_requests(request: Request) -> JSONResponse:
        return JSONResponse(list(emulator.received))

    return [Route("/debug/ground-truth", ground_truth, methods=["GET"]),
            Route("/debug/faults", set_faults, methods=["POST"]),
            Route("/debug/requests", last_requests, methods=["GET"])]
