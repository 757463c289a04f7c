# Two commands for a new user: `make demo` and `make test`. Both set themselves up.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-unit test-stress lint bench docs clean accelerate pure

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The hot path compiled with mypyc (ADR 0031), rebuilt when one of its sources changes; on a
# machine without a C compiler it says so and regency stays pure Python.
ACCEL := src/regency/_accel_manifest.json
HOT_SOURCES := $(shell $(PY) tools/accelerate.py --sources)
$(ACCEL): $(STAMP) $(HOT_SOURCES) src/regency/_accel.py
	$(BIN)/python tools/accelerate.py --if-possible

accelerate: $(STAMP)
	$(BIN)/python tools/accelerate.py

pure:
	$(PY) tools/accelerate.py --clean

demo: $(STAMP)
	$(BIN)/python examples/demo.py

test: $(STAMP) $(ACCEL)
	$(BIN)/python -m pytest -q tests

test-unit: $(STAMP) $(ACCEL)
	$(BIN)/python -m pytest -q tests/unit

# The whole suite STRESS_RUNS times (default 10) with STRESS_BURNERS CPU-bound processes
# (default 2) beside it; stops at the first failing run. See tests/stress.py.
STRESS_RUNS ?= 10
STRESS_BURNERS ?= 2
test-stress: $(STAMP) $(ACCEL)
	$(BIN)/python tests/stress.py --runs $(STRESS_RUNS) --burners $(STRESS_BURNERS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy

# The documentation site with the API reference (warnings are errors), into site/.
docs: $(STAMP)
	$(BIN)/python tools/porting_table.py --check
	$(BIN)/mkdocs build --strict -d site

bench: $(STAMP) $(ACCEL)
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) build site *.egg-info src/*.egg-info
	$(PY) tools/accelerate.py --clean
