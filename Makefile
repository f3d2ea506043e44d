# The README's commands. Each creates .venv and installs the project into it when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup sweep test bench check clean-venv

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $(STAMP)

setup: $(STAMP)

# The main job: the block-size sweep (on the CPU where there is no GPU).
sweep: $(STAMP)
	$(PY) -m sandbox sweep $(ARGS)

# The whole test suite (hypothesis profile "ci" unless HYPOTHESIS_PROFILE says otherwise).
test: $(STAMP)
	$(PY) -m pytest $(ARGS)

check: $(STAMP)
	$(PY) -m sandbox check

clean-venv:
	rm -rf $(VENV)
