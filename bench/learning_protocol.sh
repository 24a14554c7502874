#!/usr/bin/env bash
# Issue 35's pre-registered comparison (docs/learning.md, "The next comparison, pre-registered"), stage by stage.
# Every stage can be killed and called again: each run resumes from its last checkpoint and a finished one is read
# back, and the seeds go in an order that leaves a stopped stage with as many seeds of each method. The test stage
# keeps each finished run in its section's archive (bench/learning_curves, committed), so a later session or clone,
# whose out/ has gone, goes on from there.
#   bench/learning_protocol.sh validation  # the four credits at each rate in RATES, seeds 500.., validation games
#   bench/learning_protocol.sh rates       # each credit's rate by the pre-registered rule (refuses a partial table)
#   bench/learning_protocol.sh test        # both families on the test games, fresh seeds 1000.. of the six methods
#                                          # (TRCA and shaped GRPO with both rubrics), then the ablations; the first
#                                          # LONG_SEEDS seeds of the six run to twice the budget, and their test runs
#                                          # are those runs' first half (bench/learning.py's prefix_curve)
#   bench/learning_protocol.sh replicate   # the goal family's blind-rubric TRCA and shaped GRPO at fresh seeds 1010..,
#                                          # the one claim of per-step credit beyond shaping tested again
#   bench/learning_protocol.sh report      # each stage's table into bench/RESULTS.md from what is saved
# OUT (default out) holds the workdirs. PROTOCOL_SMOKE=1 runs the same path at a toy budget into out/protocol-smoke,
# recording nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-out}
RATES=(1e-3 2e-3 5e-3)
FAMILY=(--quest-lengths 2,3,4 --max-turns 8)
CREDITS=grpo,trca,gigpo,shaped
SIX=grpo,trca,gigpo,shaped,trca-blind,shaped-blind
budget=(--iterations 32 --eval-every 4)
long=(--iterations 64 --eval-every 4)
REPLICATED=trca-blind,shaped-blind
VAL_SEEDS=3 TEST_SEEDS=10 ABLATION_SEEDS=3 LONG_SEEDS=5 REPLICATION_SEEDS=10
record=(--record) archive=(--archive)
if [[ ${PROTOCOL_SMOKE:-0} == 1 ]]; then
  OUT=out/protocol-smoke
  RATES=(1e-3 2e-3)
  toy=(--groups 1 --group-size 2 --train-games 2 --eval-games 2 --eval-episodes 1 --bc-epochs 1 --hidden 32)
  budget=(--iterations 2 --eval-every 1 "${toy[@]}")
  long=(--iterations 3 --eval-every 1 "${toy[@]}")
  VAL_SEEDS=1 TEST_SEEDS=2 ABLATION_SEEDS=1 LONG_SEEDS=1 REPLICATION_SEEDS=2
  record=() archive=()
fi
val_dir() { echo "$OUT/val-$1-q24"; }  # a rate's validation workdir
val_section() { echo "learning, validation, lr $1"; }
test_section() { echo "learning, pre-registered, $1 family"; }
long_section() { echo "learning, pre-registered, twice the budget, $1 family"; }
REPLICATION_SECTION="learning, replication, blind rubric, goal family"
section_archive() {  # where bench/learning.py keeps a section's runs
  "$PY" -c 'import sys; from bench.learning import archive_path; print(archive_path(sys.argv[1]))' "$1"
}
VALIDATION_RUNS=()  # each rate's validation runs: its workdir, or, once that has gone, its recorded section's archive
for rate in "${RATES[@]}"; do
  if [[ -d $(val_dir "$rate")/curves ]]; then VALIDATION_RUNS+=("$(val_dir "$rate")")
  else VALIDATION_RUNS+=("$(section_archive "$(val_section "$rate")")"); fi
done
learn() { nice -n 19 "$PY" bench/learning.py "${FAMILY[@]}" --jobs 2 "$@"; }
objective() { [[ $1 == goal ]] && echo "--objective goal" || true; }

validation() {
  local seed rate
  for ((seed = 500; seed < 500 + VAL_SEEDS; seed++)); do  # seeds outermost: a stopped stage holds equal seeds
    for rate in "${RATES[@]}"; do
      learn "${budget[@]}" --eval-split validation --first-seed "$seed" --seeds 1 --ablation-seeds 0 \
        --oracle-seeds 0 --lr "$rate" --only "$CREDITS" --workdir "$(val_dir "$rate")"
    done
  done
}

chosen_rates() {  # the --lr-by-method argument, or nothing while a credit's rates are unequally seeded
  "$PY" bench/preregistered.py rates "${VALIDATION_RUNS[@]}" | sed -n 's/^--lr-by-method //p'
}

require_rates() {
  local rates
  rates=$(chosen_rates)
  if [[ $(tr ',' '\n' <<<"$rates" | grep -c =) != 4 ]]; then
    echo "learning_protocol: the validation stage has not chosen a rate for each of $CREDITS yet" \
      "(bench/learning_protocol.sh rates shows the table)" >&2
    exit 1
  fi
  echo "$rates"
}

test_stage() {
  local rates seed family seeds longer
  rates=$(require_rates)
  for ((seed = 1000; seed < 1000 + TEST_SEEDS; seed += 2)); do  # two seeds a call, the families alternating
    seeds=$((seed + 2 <= 1000 + TEST_SEEDS ? 2 : 1))
    longer=$((1000 + LONG_SEEDS - seed < seeds ? 1000 + LONG_SEEDS - seed : seeds))
    for family in steps goal; do
      if ((longer > 0)); then  # the first LONG_SEEDS seeds at twice the budget: their test runs are its first half
        # shellcheck disable=SC2046  # objective() is empty or two words
        learn "${long[@]}" $(objective "$family") --eval-split test --first-seed "$seed" --seeds "$longer" \
          --ablation-seeds 0 --oracle-seeds 0 --lr-by-method "$rates" --only "$SIX" --workdir "$OUT/long-$family" \
          --section "$(long_section "$family")" "${archive[@]}"
        share_cached "$OUT/long-$family" "$OUT/test-$family"
      fi
      # shellcheck disable=SC2046
      learn "${budget[@]}" $(objective "$family") --eval-split test --first-seed "$seed" --seeds "$seeds" \
        --ablation-seeds 0 --oracle-seeds 0 --lr-by-method "$rates" --only "$SIX" --workdir "$OUT/test-$family" \
        --section "$(test_section "$family")" "${archive[@]}"
    done
  done
  for family in steps goal; do  # the ablations, once the comparison's seeds are all in
    # shellcheck disable=SC2046
    learn "${budget[@]}" $(objective "$family") --eval-split test --first-seed 1000 --seeds "$TEST_SEEDS" \
      --ablation-seeds "$ABLATION_SEEDS" --oracle-seeds 0 --lr-by-method "$rates" --workdir "$OUT/test-$family" \
      --section "$(test_section "$family")" "${archive[@]}"
  done
}

replicate() {
  local rates seed seeds
  rates=$(require_rates)
  for ((seed = 1010; seed < 1010 + REPLICATION_SEEDS; seed += 2)); do  # two seeds a call: a stopped stage is balanced
    seeds=$((seed + 2 <= 1010 + REPLICATION_SEEDS ? 2 : 1))
    learn "${budget[@]}" --objective goal --eval-split test --first-seed "$seed" --seeds "$seeds" --ablation-seeds 0 \
      --oracle-seeds 0 --lr-by-method "$rates" --only "$REPLICATED" --workdir "$OUT/replicate-goal" \
      --section "$REPLICATION_SECTION" "${archive[@]}"
  done
}

share_cached() {  # the same games' gate and rubric diagnostics, made once for both budgets
  local cached
  mkdir -p "$2"
  for cached in gate.json diagnostics.json; do
    if [[ -f $1/$cached && ! -f $2/$cached ]]; then cp "$1/$cached" "$2/"; fi
  done
}

report() {
  local rates rate family
  for rate in "${RATES[@]}"; do
    learn "${budget[@]}" --eval-split validation --first-seed 500 --seeds "$VAL_SEEDS" --ablation-seeds 0 \
      --oracle-seeds 0 --lr "$rate" --only "$CREDITS" --workdir "$(val_dir "$rate")" --saved-only \
      --section "$(val_section "$rate")" "${record[@]}"
  done
  rates=$(require_rates)
  for family in steps goal; do
    # shellcheck disable=SC2046
    learn "${budget[@]}" $(objective "$family") --eval-split test --first-seed 1000 --seeds "$TEST_SEEDS" \
      --ablation-seeds "$ABLATION_SEEDS" --oracle-seeds 0 --lr-by-method "$rates" --workdir "$OUT/test-$family" \
      --saved-only --section "$(test_section "$family")" "${record[@]}"
    # shellcheck disable=SC2046
    learn "${long[@]}" $(objective "$family") --eval-split test --first-seed 1000 --seeds "$LONG_SEEDS" \
      --ablation-seeds 0 --oracle-seeds 0 --lr-by-method "$rates" --only "$SIX" --workdir "$OUT/long-$family" \
      --saved-only --section "$(long_section "$family")" "${record[@]}"
  done
  learn "${budget[@]}" --objective goal --eval-split test --first-seed 1010 --seeds "$REPLICATION_SEEDS" \
    --ablation-seeds 0 --oracle-seeds 0 --lr-by-method "$rates" --only "$REPLICATED" --workdir "$OUT/replicate-goal" \
    --saved-only --section "$REPLICATION_SECTION" "${record[@]}"
}

case ${1:-} in
  validation) validation ;;
  rates) "$PY" bench/preregistered.py rates "${VALIDATION_RUNS[@]}" ;;
  test) test_stage ;;
  replicate) replicate ;;
  report) report ;;
  *) echo "usage: bench/learning_protocol.sh validation|rates|test|replicate|report" >&2; exit 2 ;;
esac
