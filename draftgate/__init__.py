"""draftgate: an OpenAI-compatible proxy that decides, per request, whether
speculative decoding pays, and sends the request to a vLLM pool with
speculation on or off.

- ``draftgate.policy``: the Draft Law, the request-structure estimator, the
  calibration model and the gate's decision; pure logic, no I/O.
- ``draftgate.proxy``: the FastAPI service.
- ``draftgate.cli``: the ``draftgate`` command, one module per subcommand.
- ``draftgate.emulator``: an emulated vLLM server, for tests, the demo and
  evaluation without a GPU.
- ``draftgate.calibrate``: the four-arm calibration protocol.
- ``draftgate.demo``: emulated pools, a calibration and a replay, end to end.
- ``draftgate.workloads``: the committed workload data and its loaders.
"""
