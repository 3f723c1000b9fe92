# gpuwarden: the two commands a new user needs are `make demo` and `make test`.
# Both create .venv and install the project themselves.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_ARGS ?=
PYTEST_ARGS ?=

.PHONY: demo test bench reliability kafka-start kafka-stop clean

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
## (set KAFKA_BOOTSTRAP to use an existing broker instead).
test: $(STAMP)
	@set -e -o pipefail; started=0; \
	if [ -z "$$KAFKA_BOOTSTRAP" ]; then \
	  if ! $(PYTHON) scripts/kafka-local status >/dev/null 2>&1; then started=1; fi; \
	  KAFKA_BOOTSTRAP=$$($(PYTHON) scripts/kafka-local start | tail -n 1); \
	  export KAFKA_BOOTSTRAP; echo "kafka: broker at $$KAFKA_BOOTSTRAP"; \
	fi; \
	mkdir -p .cache; $(PYTHON) scripts/frameworks-venv >.cache/frameworks-venv.log 2>&1 & \
	rc=0; $(PY) -m pytest -q -rfE -p no:cacheprovider $(PYTEST_ARGS) || rc=$$?; \
	if [ $$started = 1 ]; then $(PYTHON) scripts/kafka-local stop; fi; \
	exit $$rc

bench: $(STAMP)
	$(PY) bench/run_all.py

kafka-start:
	@$(PYTHON) scripts/kafka-local start
kafka-stop:
	@$(PYTHON) scripts/kafka-local stop

clean:
	rm -rf $(VENV) .pytest_cache var
