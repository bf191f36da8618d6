.PHONY: setup demo lint test test-unit test-integration test-e2e bench calibrate-gpu
VENV := .venv
export RAY_USAGE_STATS_ENABLED := 0

# torch's CPU wheel first: an unpinned torch would pull several GB of CUDA packages
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/dlrun submit configs/examples/digits_cnn.yaml --max-cost 5

# ruff and pyright on the product code: infra/, orchestrator/, jobs/ (pyproject.toml [tool.ruff] / [tool.pyright]); seconds
lint: setup
	$(VENV)/bin/ruff check infra orchestrator jobs
	PYRIGHT_PYTHON_IGNORE_WARNINGS=1 $(VENV)/bin/pyright  # no look-up of a newer pyright on PyPI

# pytest exits 5 when no tests were collected: make fails on it, as on any failure.
# `make test` runs lint and every tier (README's and CI's command); each tier alone (CONTRIBUTING.md, "Tests"):
# unit (in-process, under a minute), integration (stand-ins, bash, CLI processes), e2e (Ray heads, VM lab).
# Two pytest-xdist workers, each taking whole test files (one Ray head, one VM lab per module): about half the time
# of one process on 2 cores, which mostly waits on VM boots, SSH and Ray start-ups (docs/testing.md).
# TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
# The tests marked `timing` (a probe's estimate against a run minutes later) run alone afterwards: beside the other
# worker, the load they compare across moves by more than their bounds.
PYTEST_ALONE := $(VENV)/bin/python -m pytest -q -p no:cacheprovider
PYTEST := $(PYTEST_ALONE) -n $(TEST_WORKERS) --dist loadfile

test: setup lint
	$(PYTEST) -m "not timing" tests
	$(PYTEST_ALONE) -m timing tests

test-unit: setup
	$(PYTEST) tests/unit

test-integration: setup
	$(PYTEST) tests/integration

test-e2e: setup
	$(PYTEST) tests/e2e

bench: setup
	$(VENV)/bin/python bench/submit_overhead.py
	$(VENV)/bin/python bench/estimator_accuracy.py
	$(VENV)/bin/python bench/plan_speed.py
	$(VENV)/bin/python bench/spot_savings.py
	$(VENV)/bin/python bench/probe_under_load.py  # the probe's estimate vs the run, quiet and beside a CPU hog
	$(VENV)/bin/python bench/vm_boot.py  # the emulated-VM lab: needs root (says so and skips without)
	$(VENV)/bin/python bench/estimator_gpu.py  # measured vs predicted GPU steps (predictions only without CUDA)

# on a machine with a CUDA GPU: its kernels measured into configs/catalog/gpu_kernels_<GPU>.csv (the estimator's fits)
calibrate-gpu: setup
	$(VENV)/bin/python bench/calibrate_gpu.py
