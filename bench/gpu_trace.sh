#!/usr/bin/env bash
# TRACE on the TextWorld target with SmolLM2-135M-Instruct on one GPU (issue 34): bench/trace_textworld.py with
# SmolLM2 (admissible mode, LoRA on every linear layer) as the base agent's start, on the test games, one training
# seed, a budget sized for ~8 minutes of one H200 from bench/gpu_learning.sh's ~10 s a 64-episode iteration (about
# 3400 episodes in all: the base agent 384, labelling 192, calibration 448 short ones, 4 adapters of 128, the mixture
# and GRPO on the target 384 each, 9 conditions x 32 games x 4 episodes); recorded in bench/RESULTS.md ("trace
# textworld, SmolLM2 (GPU)"). Run by bench/gpu_carried.sh 2 trace (the games come in load 1: the device image has no
# TextWorld compiler); TRACE_DEVICE=cpu with TRACE_SMOKE=1 runs the same path on a CPU at a toy budget.
#   bench/gpu_trace.sh WORKDIR [LOGS]    # WORKDIR holds the target's games; LOGS gets the log and table
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
work=${1:?usage: bench/gpu_trace.sh WORKDIR [LOGS]}
logs=${2:-$work}
mkdir -p "$logs"
budget=(--seeds 1 --first-seed 1 --base-iterations 12 --collection-games 32 --label-runs 3 --k 2 --pool-games 128
        --env-games 16 --adapter-iterations 4 --groups 4 --group-size 8 --eval-episodes 4 --calibration-episodes 4
        --jobs 2)
record=(--record --section "trace textworld, SmolLM2 (GPU)")
if [[ ${TRACE_SMOKE:-0} == 1 ]]; then  # the same stages at a toy budget, nothing recorded
  budget=(--seeds 1 --first-seed 1 --train-games 8 --eval-games 4 --base-iterations 1 --collection-games 4
          --label-runs 2 --k 1 --pool-games 32 --env-games 2 --adapter-iterations 1 --groups 2 --group-size 2
          --eval-episodes 1 --calibration-episodes 1 --jobs 1)
  record=()
fi
# within one device call (10 minutes, SmolLM2's conversion before it); a rerun resumes from the saved stages
timeout "${TRACE_SECONDS:-480}" "$PY" bench/trace_textworld.py --workdir "$work" --split test --model smollm2-135m-instruct \
  --device "${TRACE_DEVICE:-cuda}" "${budget[@]}" "${record[@]}" 2>&1 | tee "$logs/trace.log"
status=${PIPESTATUS[0]}
cp "$work"/base-agent-*-test/table.md "$logs/trace-table.md" 2>/dev/null
exit "$status"
