#!/usr/bin/env bash
# Issue 35's pre-registered comparison (docs/learning.md, "The next comparison, pre-registered"), stage by stage.
# Every stage can be killed and called again: each run resumes from its last checkpoint and a finished one is read
# back, and the seeds go in an order that leaves a stopped stage with as many seeds of each method.
#   bench/learning_protocol.sh validation  # the four credits at each rate in RATES, seeds 500.., validation games
#   bench/learning_protocol.sh rates       # each credit's rate by the pre-registered rule (refuses a partial table)
#   bench/learning_protocol.sh test        # both families on the test games, fresh seeds 1000.. of the six methods
#                                          # (TRCA and shaped GRPO with both rubrics), then the ablations
#   bench/learning_protocol.sh long        # the first LONG_SEEDS test seeds of the six to twice the budget, each
#                                          # continuing its test run (bench/learning.py --extend-from)
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
VAL_SEEDS=3 TEST_SEEDS=10 ABLATION_SEEDS=3 LONG_SEEDS=5
record=(--record)
if [[ ${PROTOCOL_SMOKE:-0} == 1 ]]; then
  OUT=out/protocol-smoke
  RATES=(1e-3 2e-3)
  toy=(--groups 1 --group-size 2 --train-games 2 --eval-games 2 --eval-episodes 1 --bc-epochs 1 --hidden 32)
  budget=(--iterations 2 --eval-every 1 "${toy[@]}")
  long=(--iterations 3 --eval-every 1 "${toy[@]}")
  VAL_SEEDS=1 TEST_SEEDS=2 ABLATION_SEEDS=1 LONG_SEEDS=1
  record=()
fi
val_dir() { echo "$OUT/val-$1-q24"; }  # a rate's validation workdir
VALIDATION_DIRS=()
for rate in "${RATES[@]}"; do VALIDATION_DIRS+=("$(val_dir "$rate")"); done
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
  "$PY" bench/preregistered.py rates "${VALIDATION_DIRS[@]}" | sed -n 's/^--lr-by-method //p'
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
  local rates seed family
  rates=$(require_rates)
  for ((seed = 1000; seed < 1000 + TEST_SEEDS; seed += 2)); do  # two seeds a call, the families alternating
    for family in steps goal; do
      # shellcheck disable=SC2046  # objective() is empty or two words
      learn "${budget[@]}" $(objective "$family") --eval-split test --first-seed "$seed" \
        --seeds $((seed + 2 <= 1000 + TEST_SEEDS ? 2 : 1)) --ablation-seeds 0 --oracle-seeds 0 \
        --lr-by-method "$rates" --only "$SIX" --workdir "$OUT/test-$family"
    done
  done
  for family in steps goal; do  # the ablations, once the comparison's seeds are all in
    # shellcheck disable=SC2046
    learn "${budget[@]}" $(objective "$family") --eval-split test --first-seed 1000 --seeds "$TEST_SEEDS" \
      --ablation-seeds "$ABLATION_SEEDS" --oracle-seeds 0 --lr-by-method "$rates" --workdir "$OUT/test-$family"
  done
}

long_stage() {
  local rates family cached
  rates=$(require_rates)
  for family in steps goal; do
    mkdir -p "$OUT/long-$family"
    for cached in gate.json diagnostics.json; do  # the same games' gate and rubric diagnostics, not made again
      if [[ -f $OUT/test-$family/$cached && ! -f $OUT/long-$family/$cached ]]; then
        cp "$OUT/test-$family/$cached" "$OUT/long-$family/"
      fi
    done
    # shellcheck disable=SC2046
    learn "${long[@]}" $(objective "$family") --eval-split test --first-seed 1000 --seeds "$LONG_SEEDS" \
      --ablation-seeds 0 --oracle-seeds 0 --lr-by-method "$rates" --only "$SIX" \
      --extend-from "$OUT/test-$family" --workdir "$OUT/long-$family"
  done
}

report() {
  local rates rate family
  for rate in "${RATES[@]}"; do
    learn "${budget[@]}" --eval-split validation --first-seed 500 --seeds "$VAL_SEEDS" --ablation-seeds 0 \
      --oracle-seeds 0 --lr "$rate" --only "$CREDITS" --workdir "$(val_dir "$rate")" --saved-only \
      "${record[@]}" ${record:+--section "learning, validation, lr $rate"}
  done
  rates=$(require_rates)
  for family in steps goal; do
    # shellcheck disable=SC2046
    learn "${budget[@]}" $(objective "$family") --eval-split test --first-seed 1000 --seeds "$TEST_SEEDS" \
      --ablation-seeds "$ABLATION_SEEDS" --oracle-seeds 0 --lr-by-method "$rates" --workdir "$OUT/test-$family" \
      --saved-only "${record[@]}" ${record:+--section "learning, pre-registered, $family family"}
    # shellcheck disable=SC2046
    learn "${long[@]}" $(objective "$family") --eval-split test --first-seed 1000 --seeds "$LONG_SEEDS" \
      --ablation-seeds 0 --oracle-seeds 0 --lr-by-method "$rates" --only "$SIX" --workdir "$OUT/long-$family" \
      --saved-only "${record[@]}" ${record:+--section "learning, pre-registered, twice the budget, $family family"}
  done
}

case ${1:-} in
  validation) validation ;;
  rates) "$PY" bench/preregistered.py rates "${VALIDATION_DIRS[@]}" ;;
  test) test_stage ;;
  long) long_stage ;;
  report) report ;;
  *) echo "usage: bench/learning_protocol.sh validation|rates|test|long|report" >&2; exit 2 ;;
esac
