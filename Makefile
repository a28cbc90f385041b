# The README's two commands: `make demo` (the main job) and `make test` (the whole suite).
# Both create .venv on first use and install the package with its extras; torch is pinned to the
# CPU build for development (users bring their own torch; the package only asks for a range).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-min test-ray-floor lint bench bench-local clean

$(STAMP): pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m arrow_split demo $(ARGS)

test: $(STAMP)
	$(BIN)/python -m ruff check arrow_split tests benchmarks
	$(BIN)/python -m ruff format --check arrow_split tests benchmarks
	$(BIN)/python -m mypy
	ARROW_SPLIT_HYPOTHESIS_PROFILE=$${ARROW_SPLIT_HYPOTHESIS_PROFILE:-ci} $(BIN)/python -m pytest $(PYTEST_ARGS)

# The suite without Ray under the lowest numpy and pyarrow that pyproject.toml allows, in a second
# virtualenv (requirements-min.txt); CI runs it after `make test`.
MIN_VENV ?= .venv-min
MIN_STAMP := $(MIN_VENV)/.installed

$(MIN_STAMP): pyproject.toml requirements-min.txt
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MIN_VENV)/bin/python -m pip install --quiet -r requirements-min.txt
	touch $(MIN_STAMP)

test-min: $(MIN_STAMP)
	$(MIN_VENV)/bin/python -c "import numpy, pyarrow; print('numpy', numpy.__version__, 'pyarrow', pyarrow.__version__)"
	ARROW_SPLIT_HYPOTHESIS_PROFILE=$${ARROW_SPLIT_HYPOTHESIS_PROFILE:-ci} $(MIN_VENV)/bin/python -m pytest -m "not ray" --ignore=tests/ray --ignore=tests/test_benchmarks_smoke.py $(PYTEST_ARGS)

# The Ray tests under the oldest Ray pyproject.toml allows (RAY_FLOOR), in a third virtualenv:
# that Ray is installed FIRST, then the package with its extras; the target fails if installing
# the package moved Ray. Ray 2.49's shutdown leaves a /dev/null handle and a Popen to the
# garbage collector (ResourceWarning): ignored here, every other warning stays an error.
RAY_FLOOR ?= 2.49.2
RAY_VENV ?= .venv-ray-floor
RAY_STAMP := $(RAY_VENV)/.installed-$(RAY_FLOOR)

$(RAY_STAMP): pyproject.toml
	$(PYTHON) -m venv $(RAY_VENV)
	$(RAY_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(RAY_VENV)/bin/python -m pip install --quiet "ray==$(RAY_FLOOR)"
	$(RAY_VENV)/bin/python -m pip install --quiet "torch==2.13.0" -e ".[ray,torch,test]" "sybil>=9"
	$(RAY_VENV)/bin/python -c "import ray, sys; sys.exit(0 if ray.__version__ == '$(RAY_FLOOR)' else 'installing arrow-split moved Ray from $(RAY_FLOOR) to ' + ray.__version__)"
	touch $(RAY_STAMP)

test-ray-floor: $(RAY_STAMP)
	RAY_USAGE_STATS_ENABLED=0 ARROW_SPLIT_HYPOTHESIS_PROFILE=$${ARROW_SPLIT_HYPOTHESIS_PROFILE:-ci} $(RAY_VENV)/bin/python -m pytest tests/ray -m "not slow" -W "ignore::pytest.PytestUnraisableExceptionWarning" -W "ignore::ResourceWarning" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/python -m ruff check arrow_split tests benchmarks
	$(BIN)/python -m mypy

# Every JSON the README quotes, stamped, into docs/benchmarks/ (about 10 minutes on 2 cores);
# BENCH_ARGS="--smoke" for seconds, BENCH_ARGS="--only step,journal" for some. `bench-local`
# writes into benchmarks/results/ (ignored by git) and leaves the committed results alone.
bench: $(STAMP)
	$(BIN)/python -m benchmarks --out docs/benchmarks $(BENCH_ARGS)

bench-local: $(STAMP)
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(MIN_VENV) $(RAY_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# The manual (docs/*.md, MyST) and its API reference from the docstrings, built with Sphinx into
# docs/_build/html; any warning fails the build. CI runs it after `make test`.
.PHONY: docs
docs: $(STAMP)
	$(BIN)/python -m sphinx -W --keep-going -n -q -b html docs docs/_build/html
