# gpuwarden: the two commands a new user needs are `make demo` and `make test`.
# Both create .venv and install the project themselves.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_ARGS ?=
PYTEST_ARGS ?=
## pytest-xdist workers: the suite waits on brokers and subprocesses, so three share two cores well
PYTEST_WORKERS ?= 3

.PHONY: demo test test-frameworks soak bench kafka-start kafka-stop clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,report]'
	touch $(STAMP)

## Standalone pipeline (agent → engine → router in one process, no Kafka) with baselines that form
## within the run (app/demo.yaml): this machine's GPUs when NVML works, else simulated ones (it says
## which). Fresh state in var/demo/ each time. E.g. make demo DEMO_ARGS="--simulate --duration 2h".
demo: $(STAMP)
	$(VENV)/bin/gpuwarden demo $(DEMO_ARGS)

## The whole suite against a real Kafka broker that this target starts and stops
## (set KAFKA_BOOTSTRAP to use an existing broker instead). The training-framework tests (marker
## `frameworks`: torch, Lightning, transformers, ~5.4 GB) are skipped unless GW_FRAMEWORKS=1, which
## builds their venv (scripts/frameworks-venv) in the background meanwhile; CI (.ci/run) does not ask.
GW_FRAMEWORKS ?=
export GW_FRAMEWORKS
test: $(STAMP)
	@set -e -o pipefail; started=0; \
	if [ -z "$$KAFKA_BOOTSTRAP" ]; then \
	  if ! $(PYTHON) scripts/kafka-local status >/dev/null 2>&1; then started=1; fi; \
	  KAFKA_BOOTSTRAP=$$($(PYTHON) scripts/kafka-local start | tail -n 1); \
	  export KAFKA_BOOTSTRAP; echo "kafka: broker at $$KAFKA_BOOTSTRAP"; \
	fi; \
	mkdir -p .cache; \
	if [ "$$GW_FRAMEWORKS" = 1 ]; then $(PYTHON) scripts/frameworks-venv >.cache/frameworks-venv.log 2>&1 & \
	else echo "frameworks: the training-framework tests are skipped (make test-frameworks runs them; it downloads ~5.4 GB once)"; fi; \
	if command -v go >/dev/null; then $(PY) scripts/helm-check --prepare >.cache/helm-check.log 2>&1 & fi; \
	rc=0; $(PY) -m pytest -q -rfE -p no:cacheprovider --durations=30 -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS) || rc=$$?; \
	if [ $$started = 1 ]; then $(PYTHON) scripts/kafka-local stop; fi; \
	exit $$rc

## Only the training-framework tests (tests/integrations/, marker `frameworks`), building their
## venv first: torch, Lightning, transformers and accelerate from PyPI into .cache/frameworks-venv
## (~5.4 GB, once per requirement hash; ~22 min on this 2-core box, 1,330 s in #33), then the tests.
test-frameworks: $(STAMP)
	$(PYTHON) scripts/frameworks-venv
	GW_FRAMEWORKS=1 $(PY) -m pytest -q -rfEs -p no:cacheprovider -m frameworks $(PYTEST_ARGS) tests/integrations

## The random-kill test (tests/reliability/test_random_kills.py) over ten random seeds, 2 and 3
## workers each, against a broker it starts; each run prints its seed as it starts (in pytest's own
## process: -n 0). E.g. make soak SOAK_SEEDS=20.
SOAK_SEEDS ?= 10
soak: $(STAMP)
	@GW_SOAK_SEEDS=$(SOAK_SEEDS) $(MAKE) --no-print-directory test PYTEST_WORKERS=0 \
	  PYTEST_ARGS="tests/reliability/test_random_kills.py -s"

bench: $(STAMP)
	$(PY) bench/run_all.py

kafka-start:
	@$(PYTHON) scripts/kafka-local start
kafka-stop:
	@$(PYTHON) scripts/kafka-local stop

clean:
	rm -rf $(VENV) .pytest_cache var
