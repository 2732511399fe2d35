# Every target installs what it needs into .venv on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test install demo evaluate evaluate-grid bench soak clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[test,plot,measure]'
	touch $(STAMP)

install: $(STAMP)

# Two workers, a test file to each at a time: the files' servers and fixtures stay within one worker.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# One seed of the verdict on two emulated GPUs: its short version (about a minute on 2 cores).
demo: $(STAMP)
	$(BIN)/draftgate demo

# Every strategy on fleets of 2, 4 and 8 emulated H200s, five seeds, in virtual time (about twenty minutes on 2 cores).
evaluate: $(STAMP)
	$(BIN)/draftgate evaluate

# The plan against the verdict across fleet sizes, latency targets and traffic mixes, two seeds each: hours on 2 cores (docs/plan.md).
evaluate-grid: $(STAMP)
	$(BIN)/draftgate evaluate --grid

# Heavy measurements, not part of `make test`: each prints figures beside a baseline.
bench: $(STAMP)
	$(BIN)/python -m bench.bench_estimate
	$(BIN)/python -m bench.bfcl_accuracy
	$(BIN)/python -m bench.bench_proxy
	$(BIN)/python -m bench.trace_proxy
	$(BIN)/python -m bench.bench_disconnect
	$(BIN)/python -m bench.bench_large_answer
	$(BIN)/python -m bench.bench_conversation
	$(BIN)/python -m bench.bench_burst
	$(BIN)/python -m bench.bench_gc
	$(BIN)/python -m bench.emulator_vs_published
	$(BIN)/python -m bench.bench_simulation
	$(BIN)/python -m bench.simulation_vs_wall_clock
	$(BIN)/python -m bench.routing_regret

# Agent traffic through the proxy for five minutes while replicas fail and die: nothing may be lost.
soak: $(STAMP)
	$(BIN)/python -m bench.soak --seconds 300 --rate 40

clean:
	rm -rf $(VENV) build *.egg-info demo-output evaluate-output
