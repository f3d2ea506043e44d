# The README's commands. Each creates .venv and installs the project into it when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup sweep test test-deep bench check clean-venv

# --no-compile: Python byte-compiles what it imports on first use; pip byte-compiling every installed file
# took 16 of the 46 s of a fresh set-up.
# The [tool.sandbox.no-deps] requirements of pyproject.toml (FlashInfer's wheel, for its headers): without their
# dependencies, which the sandbox never imports.
NO_DEPS = $(shell sed -n 's/^requirements = \[\(.*\)\]/\1/p' pyproject.toml | tr -d '",')

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e .
	$(PY) -m pip install --quiet --no-compile --no-deps $(NO_DEPS)
	touch $(STAMP)

setup: $(STAMP)

# The main job: the block-size sweep (on the CPU where there is no GPU), then the memory study.
# ARGS go to the sweep, MEMORY_ARGS to the memory study; a wrong sweep point still fails make.
sweep: $(STAMP)
	$(PY) -m sandbox sweep $(ARGS); status=$$?; $(PY) -m sandbox memory $(MEMORY_ARGS) && exit $$status

# Timed benchmarks (pytest-benchmark): every variant x block size, cache writes, append_slot.
# The JSON goes to a new results/<UTC>-bench/bench.json.
bench: $(STAMP)
	dir=$$($(PY) -c 'from sandbox.results import new_run_dir; print(new_run_dir("bench"))') && \
	$(PY) -m pytest tests/bench/ --benchmark-enable --benchmark-json "$$dir/bench.json" $(ARGS) && \
	echo "benchmark JSON: $$dir/bench.json"

# The layers contract (pyproject.toml's [tool.importlinter]), then the whole test suite (hypothesis profile
# "ci" unless HYPOTHESIS_PROFILE says otherwise), spread over
# JOBS processes (pytest-xdist; default: one per core). Work stealing: a few long simulated tests
# must not leave the other processes idle at the end.
JOBS ?= auto
test: $(STAMP)
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -n $(JOBS) --dist worksteal $(ARGS)

# Every test, the deep tier included, with hypothesis's thorough profile (20x the examples): hours, not minutes.
test-deep: $(STAMP)
	HYPOTHESIS_PROFILE=thorough $(PY) -m pytest -n $(JOBS) --dist worksteal $(ARGS)

check: $(STAMP)
	$(PY) -m sandbox check

clean-venv:
	rm -rf $(VENV)
