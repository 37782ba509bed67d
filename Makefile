# Two commands for a fresh machine: `make demo` and `make test`. Both create .venv and install the package with
# pinned, working dependencies (numba-cuda 0.30.x needs numpy < 2.5) on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-gpu compile-check notebooks bench figures grade clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test,notebooks]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/linattn-numba demo

# Every tier that runs without a GPU: oracles, every rung in the simulator, the notebooks, the compile tier.
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q

# Same, without the compile tier (it takes a minute or two).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q -m "not gpu and not compile"

# On a GPU machine: the GPU tier.
test-gpu: $(STAMP)
	$(BIN)/python -m pytest -m gpu tests/test_gpu.py tests/test_r4_scan.py -q

compile-check: $(STAMP)
	$(BIN)/linattn-numba compile-check

# Notebooks as .ipynb for people who want them (the percent-format .py files are the source of truth).
notebooks: $(STAMP)
	$(BIN)/jupytext --to _build//ipynb notebooks/*.py

# Figures and the README results table, from the committed H200 JSON in figures/data.
figures: $(STAMP)
	$(BIN)/linattn-numba figures

# Grade an assignment: make grade FILE=exercises/r1_recurrent.py
grade: $(STAMP)
	$(BIN)/linattn-numba grade $(FILE)

bench: $(STAMP)
	$(BIN)/linattn-numba bench --step --softmax

clean:
	rm -rf $(VENV) build dist src/*.egg-info demo.png
