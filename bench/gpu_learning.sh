#!/usr/bin/env bash
# SmolLM2 + LoRA on the TextWorld family on one GPU: TRCA and sparse GRPO side by side, each fitted to
# $LEARNING_MINUTES of wall clock (bench/learning_smollm2.py --minutes: the iterations, at most 40 of 8 x 8 episodes,
# sized from one timed probe iteration), recorded in bench/RESULTS.md ("learning, SmolLM2 (GPU)" and "learning,
# SmolLM2, sparse GRPO (GPU)"). Run by bench/gpu_check.sh and bench/gpu_carried.sh 2, with their Python.
#   bench/gpu_learning.sh WORKDIR [LOGS]    # LOGS: where the runs' logs and summaries are copied (default WORKDIR)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
MINUTES=${LEARNING_MINUTES:-6}
work=${1:?usage: bench/gpu_learning.sh WORKDIR [LOGS]}
logs=${2:-$work}
mkdir -p "$work" "$logs"
status=0
for method in trca grpo; do
  section="learning, SmolLM2 (GPU)"
  [[ $method == grpo ]] && section="learning, SmolLM2, sparse GRPO (GPU)"
  timeout $((${MINUTES%.*} * 60 + 90)) "$PY" bench/learning_smollm2.py --workdir "$work" --device cuda \
    --method "$method" --iterations 40 --groups 8 --group-size 8 --threads 4 --minutes "$MINUTES" \
    --record --section "$section" >"$logs/learning-$method.log" 2>&1 &
done
wait -n || status=1
wait -n || status=1
[[ $logs == "$work" ]] || cp "$work"/summary-*.json "$logs/" 2>/dev/null
exit $status
