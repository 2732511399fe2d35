"""An emulated vLLM OpenAI server with speculation on or off: the backend for
tests, benchmarks and the demo. It is an emulator and says so."""
