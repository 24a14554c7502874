#!/usr/bin/env bash
# SmolLM2 + LoRA on the TextWorld family on one GPU in TRCA's paper's regime (issue 35): free-text commands
# (bench/learning_smollm2.py --action-mode generate), sparse GRPO, GRPO + TRCA and GiGPO, $LEARNING_SEEDS training
# seeds each (default 3), every run the same episodes ($LEARNING_ITERATIONS iterations of 8 x 8, default 10), all at
# once on the one GPU; then one table by method, paired over seeds and games (learning_smollm2.py --summarize),
# recorded in bench/RESULTS.md ("learning, SmolLM2, free text (GPU)"). Sized for ~6 minutes of one H200 by estimate
# (~25 s an iteration with nine runs sharing it); not yet run on a GPU. A run past $LEARNING_MINUTES (default 8) is
# stopped and left out of the table, which says so. Run by bench/gpu_check.sh and bench/gpu_carried.sh 2, with their
# Python; LEARNING_DEVICE=cpu LEARNING_SMOKE=1 runs the same path on a CPU at a toy budget, nothing recorded.
#   bench/gpu_learning.sh WORKDIR [LOGS]    # LOGS: where the runs' logs and summaries are copied (default WORKDIR)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
ITERATIONS=${LEARNING_ITERATIONS:-10}
SEEDS=${LEARNING_SEEDS:-3}
MINUTES=${LEARNING_MINUTES:-8}
budget=(--iterations "$ITERATIONS" --groups 8 --group-size 8)
record=(--record --section "learning, SmolLM2, free text (GPU)")
if [[ ${LEARNING_SMOKE:-0} == 1 ]]; then
  budget=(--iterations 1 --groups 1 --group-size 2 --train-games 2 --eval-games 2 --eval-episodes 1)
  record=()
fi
work=${1:?usage: bench/gpu_learning.sh WORKDIR [LOGS]}
logs=${2:-$work}
mkdir -p "$work" "$logs"
rm -f "$work"/summary-*.json  # the table is this call's runs only
for method in grpo trca gigpo; do
  for ((seed = 0; seed < SEEDS; seed++)); do
    timeout $((${MINUTES%.*} * 60)) "$PY" bench/learning_smollm2.py --workdir "$work" \
      --device "${LEARNING_DEVICE:-cuda}" --action-mode generate --method "$method" --seed "$seed" \
      "${budget[@]}" --threads 1 \
      >"$logs/learning-$method-s$seed.log" 2>&1 &
  done
done
finished=0
for job in $(jobs -p); do wait "$job" && finished=$((finished + 1)); done
echo "gpu_learning: $finished of $((3 * SEEDS)) runs finished within $MINUTES minutes" >&2
"$PY" bench/learning_smollm2.py --workdir "$work" --summarize "${record[@]}" 2>&1 | tee "$logs/learning-summary.log"
status=${PIPESTATUS[0]}
[[ $logs == "$work" ]] || cp "$work"/summary-*.json "$logs/" 2>/dev/null
[[ $finished == $((3 * SEEDS)) ]] || status=1
exit "$status"
