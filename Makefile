# Everything a fresh machine needs: `make demo` runs the main job, `make test` runs the tests.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv demo test test-fast bench clean

venv: $(STAMP)

# The CPU torch wheel lies on disk; installing it first keeps the project's torch range from pulling a CUDA build.
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,train]'
	$(PY) -m tracec.runtime.jit
	touch $(STAMP)

demo: venv
	$(VENV)/bin/tracec demo

test: venv
	$(PY) -m pytest -n 2 tests

test-fast: venv
	$(PY) -m pytest -n 2 -m "not slow" tests

bench: venv
	$(PY) -m pytest bench --benchmark-only -p no:xdist

clean:
	rm -rf $(VENV) build *.egg-info
