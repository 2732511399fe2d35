"""What measures: the vLLM emulator, workloads, the four-arm protocol, benchmarks."""
