"""Trajectories in, rewards out, for `examples/household.rubric` on deterministic household data
(bench/household_data.py):

- fact building from in-memory episodes: today's builder before the rewrite (bench/baseline_facts.py) against the
  new one with its native gatherer (runtime/_gather.c) and against the floor of touching every value the rubric
  reads once in plain Python;
- reading 10^5 steps of JSONL: the line reader and Arrow's columnar reader against parsing every line (json.loads
  with the collector paused, and with it running as a naive loop has it; orjson and msgspec when installed);
- writing the per-step output: per-step dicts (what `tracec score` did) against the columnar writers;
- `tracec score` end to end on 10^5 steps, JSONL -> Parquet, Parquet -> Parquet, Arrow -> Parquet, in-process against
  floors that are lower bounds (Arrow's own multi-threaded parse of the same fields, or reading the file's bytes,
  then writing the output table), and as a command;
- the first `tracec score` of a fresh process at 10^4 steps: the rubric's kernel cache empty, everything empty
  (TRACEC_CACHE_DIR, NUMBA_CACHE_DIR and XDG_CACHE_HOME new folders), and warm.

Every part follows bench/sides.py: interleaved rounds, medians with their range, paired ratios. Writes the section
"trajectories" of bench/RESULTS.md.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow.json as pj
import pyarrow.parquet as pq
import pytest
from tracec.compiler.load import load_rubric
from tracec.runtime.facts import columns
from tracec.runtime.facts.fact_batch import build_fact_batch
from tracec.runtime.facts.trajectories.arrow import json_table
from tracec.runtime.facts.trajectories.files import convert_trajectories
from tracec.runtime.facts.trajectories.jsonl import Episode, gc_paused, read_trajectories
from tracec.runtime.output import scores_table, write_scores
from tracec.runtime.scoring import RubricScorer, score_file

from bench import baseline_facts
from bench.household_data import household_episodes, write_jsonl
from bench.results import markdown_table, record
from bench.sides import Rounds, Spread, describe, interleaved, load_average

COMMAND = "pytest bench/test_trajectories_bench.py --benchmark-only -p no:xdist"
RUBRIC = Path(__file__).resolve().parents[1] / "examples" / "household.rubric"
SIZES = (10**5, 10**6)
SET_FIELDS = {"holding", "visible", "opened"}


def _episodes(records: Sequence[dict]) -> list[Episode]:
    return [Episode(r["episode"], r["task"], r["instruction"], r["states"], r["actions"], r["env_reward"],
                    r["success"]) for r in records]


def touch_every_value(episodes: Sequence[Episode], state_fields: list[str], action_fields: list[str]) -> None:
    """The floor: every fact the rubric reads, and every element of its sets, touched once in plain Python."""
    for episode in episodes:
        for state in episode.states:
            for field in state_fields:
                value = state.get(field)
                if field in SET_FIELDS and value:
                    for _ in value:
                        pass
        for action in episode.actions:
            for field in action_fields:
                action.get(field)


@pytest.fixture(scope="module")
def found():
    results: dict = {}
    yield results
    record("trajectories", _report(results), COMMAND)


@pytest.fixture(scope="module")
def plan():
    return load_rubric(RUBRIC.read_text(), str(RUBRIC)).plan


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("household")
    with gc_paused():
        jsonl = write_jsonl(household_episodes(10**5, seed=0), folder / "h1e5.jsonl")
        small = write_jsonl(household_episodes(10**4, seed=1), folder / "h1e4.jsonl")
        convert_trajectories(jsonl, folder / "h1e5.parquet")
        convert_trajectories(jsonl, folder / "h1e5.arrow")
    return {"jsonl": jsonl, "parquet": folder / "h1e5.parquet", "arrow": folder / "h1e5.arrow", "small": small,
            "folder": folder}


@pytest.mark.parametrize("size", SIZES)
def test_fact_building(benchmark, found, plan, size) -> None:
    with gc_paused():
        episodes = _episodes(household_episodes(size, seed=size))
        state_fields = ["location", "holding", "visible", "opened", "feedback"]
        action_fields = ["verb", "obj", "recep", "parsed"]
        assert columns._gather is not None, "the native gatherer is not built; `make venv` builds it"
        new, old = build_fact_batch(episodes, plan, native=True), baseline_facts.build_fact_batch(episodes, plan)
        for name, column in old.columns.items():  # the same columns, value for value
            assert column.values.tolist() == new.columns[name].values.tolist()
            assert column.known.tolist() == new.columns[name].known.tolist()
        benchmark.group = f"fact building {size:.0e} steps"
        found[("facts", size)] = interleaved(benchmark, {
            "old": (lambda: baseline_facts.build_fact_batch(episodes, plan), 1),
            "new": (lambda: build_fact_batch(episodes, plan, native=True), 1),
            "floor": (lambda: touch_every_value(episodes, state_fields, action_fields), 1),
        })


def test_reading_jsonl(benchmark, found, plan, files) -> None:
    lines = files["jsonl"].read_bytes().splitlines()
    floor_options = _floor_options(files["jsonl"], plan)

    def parse_paused() -> None:
        with gc_paused():
            parsed = [json.loads(line) for line in lines]
            del parsed

    def parse_collecting() -> None:
        parsed = [json.loads(line) for line in lines]
        del parsed

    def line_reader() -> None:
        with gc_paused():
            episodes = read_trajectories(files["jsonl"])
            del episodes

    def parsing_with(loads: Callable[[bytes], object]) -> Callable[[], None]:
        return lambda: _parse_with(loads, lines)

    sides: dict[str, tuple[Callable[[], object], int]] = {
        ARROW_FLOOR: (lambda: pj.read_json(files["jsonl"], parse_options=floor_options), 1),
        "Arrow JSON reader, plan's fields (what `tracec score` runs)": (
            lambda: json_table(str(files["jsonl"]), plan), 1),
        "json.loads, collector paused": (parse_paused, 1),
        "json.loads, collector running": (parse_collecting, 1),
        "read_trajectories (line reader)": (line_reader, 1)}
    for module in ("orjson", "msgspec"):
        if importlib.util.find_spec(module) is not None:
            loads = __import__(module).loads if module == "orjson" else __import__("msgspec").json.decode
            sides[f"{module}, collector paused"] = (parsing_with(loads), 1)
    benchmark.group = "reading 1e5 steps of JSONL"
    found["read"] = interleaved(benchmark, sides)


FACTS_NOTE = (
    "Fact building from in-memory episodes (the trainer's path), household rubric: 9 fields read (3 sets, 3 "
    "entities, an enum, a bool, a text for a lift; prev and next of each state field), 2 bindings; the floor reads "
    "each of those fields once per state or action and iterates each set's elements, in plain Python (a floor for "
    "a Python-object input: the fields must be visited). The new builder reads the fields with its C extension "
    "(runtime/_gather.c: every field of a state in one pass, set rows sorted and gathered in C). Collector paused "
    "for all sides.")
ARROW_FLOOR = "floor: Arrow's parse of the same fields (all threads)"
JSON_LOADS_FLOOR = "floor jsonl, json.loads"


def _floor_options(path: Path, plan) -> pj.ParseOptions:
    """Arrow's parse options for the fields `tracec score` reads of `path` (the schema its reader gives them)."""
    table = json_table(str(path), plan)
    assert table is not None, f"{path} was declined by the Arrow reader"
    return pj.ParseOptions(explicit_schema=table.schema, unexpected_field_behavior="ignore")


def _parse_with(loads, lines) -> None:
    with gc_paused():
        parsed = [loads(line) for line in lines]
        del parsed


def test_writing_output(benchmark, found, files) -> None:
    import pyarrow as pa

    result = RubricScorer.from_file(RUBRIC).score(files["parquet"])
    out = files["folder"]

    def per_step_parquet() -> None:
        pq.write_table(pa.Table.from_pylist(list(result.records())), out / "old.parquet")

    def per_step_jsonl() -> None:
        with open(out / "old.jsonl", "w") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in result.records())

    benchmark.group = "writing 1e5 steps"
    found["write"] = interleaved(benchmark, {
        "per-step dicts -> Parquet": (per_step_parquet, 1),
        "columns -> Parquet": (lambda: write_scores(result, out / "new.parquet"), 3),
        "per-step json.dumps -> JSONL": (per_step_jsonl, 1),
        "streamed columns -> JSONL": (lambda: write_scores(result, out / "new.jsonl"), 1),
    })
    assert (out / "new.jsonl").read_text() == (out / "old.jsonl").read_text()


def test_end_to_end(benchmark, found, plan, files, monkeypatch) -> None:
    monkeypatch.setenv("TRACEC_CACHE_DIR", str(files["folder"] / "kernels"))
    result = RubricScorer.from_file(RUBRIC).score(files["parquet"])
    table = scores_table(result)
    out = files["folder"] / "e2e.parquet"
    floor_options = _floor_options(files["jsonl"], plan)

    def jsonl_floor() -> None:
        pj.read_json(files["jsonl"], parse_options=floor_options)
        pq.write_table(table, out)

    lines = files["jsonl"].read_bytes().splitlines()

    def json_loads_floor() -> None:  # what a user's own loop pays at least: every line parsed, then the columns
        with gc_paused():
            parsed = [json.loads(line) for line in lines]
            del parsed
        pq.write_table(table, out)

    def bytes_floor(kind: str) -> Callable[[], None]:
        def floor() -> None:
            files[kind].read_bytes()
            pq.write_table(table, out)
        return floor

    def evaluating(kind: str) -> Callable[[], str]:
        return lambda: score_file(RubricScorer.from_file(RUBRIC), files[kind], out)

    sides: dict[str, tuple[Callable[[], object], int]] = {}
    for kind, floor in (("jsonl", jsonl_floor), ("parquet", bytes_floor("parquet")), ("arrow", bytes_floor("arrow"))):
        sides[f"eval {kind} -> parquet"] = (evaluating(kind), 1)
        sides[f"floor {kind}"] = (floor, 1)
    sides[JSON_LOADS_FLOOR] = (json_loads_floor, 1)
    benchmark.group = "tracec score, 1e5 steps, in-process"
    found["e2e"] = interleaved(benchmark, sides)
    commands: dict[str, tuple[Callable[[], object], int]] = {  # the whole command, a new process each run
        kind: (functools.partial(_eval_process, files[kind], out, os.environ), 1) for kind in ("jsonl", "parquet")}
    # The marginal cost of 9e4 steps (1e5 minus 1e4) in fresh processes, where start-up costs cancel: the command
    # against a process that json.loads every line and writes the same size of output.
    small_table = scores_table(RubricScorer.from_file(RUBRIC).score(files["small"]))
    pq.write_table(small_table, files["folder"] / "small-output.parquet")
    pq.write_table(table, files["folder"] / "output.parquet")
    commands["jsonl, 1e4 steps"] = (functools.partial(_eval_process, files["small"], out, os.environ), 1)
    for label, size, output in (("1e5", "jsonl", "output.parquet"), ("1e4", "small", "small-output.parquet")):
        commands[f"json.loads floor, {label} steps"] = (functools.partial(
            _floor_process, files[size], files["folder"] / output, out), 1)
    found["e2e-command"] = interleaved(None, commands, warm=False)


def _eval_process(trajectories: Path, out: Path, env, backend: str = "auto") -> None:
    """`tracec score` in a new process."""
    tracec = Path(sys.executable).with_name("tracec")
    done = subprocess.run([str(tracec), "eval", str(RUBRIC), "--trajectories", str(trajectories), "-o", str(out),
                           "--backend", backend], env=dict(env), capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr


FLOOR_PROCESS = """
import gc, json, sys
import pyarrow.parquet as pq
trajectories, output, out = sys.argv[1:]
table = pq.read_table(output)  # the output's columns, as the scorer would have them in memory
gc.disable()
with open(trajectories, "rb") as lines:
    parsed = [json.loads(line) for line in lines]
pq.write_table(table, out)
"""


def _floor_process(trajectories: Path, output: Path, out: Path) -> None:
    """A new process that parses every line with json.loads (collector off) and writes the output's columns."""
    subprocess.run([sys.executable, "-c", FLOOR_PROCESS, str(trajectories), str(output), str(out)], check=True,
                   timeout=600)


def test_first_eval_in_a_fresh_process(benchmark, found, files) -> None:
    folder, out = files["folder"], files["folder"] / "first.parquet"
    fresh = itertools.count()

    def empty(*variables: str) -> dict[str, str]:
        """The environment with each of `variables` a new, empty folder."""
        return dict(os.environ, **{name: str(folder / f"empty-{next(fresh)}") for name in variables})

    everything = ("TRACEC_CACHE_DIR", "NUMBA_CACHE_DIR", "XDG_CACHE_HOME")
    warm_env = empty("TRACEC_CACHE_DIR")
    _eval_process(files["small"], out, warm_env)
    _eval_process(files["small"], out, warm_env, "numba")
    sides = {
        "kernel cache empty (auto: the C kernel)": lambda: _eval_process(files["small"], out, empty(everything[0])),
        "kernel cache empty, --backend numba": lambda: _eval_process(files["small"], out, empty(everything[0]),
                                                                     "numba"),
        "everything empty (auto)": lambda: _eval_process(files["small"], out, empty(*everything)),
        "everything empty, --backend numba": lambda: _eval_process(files["small"], out, empty(*everything), "numba"),
        "warm (auto)": lambda: _eval_process(files["small"], out, warm_env),
        "warm, --backend numba": lambda: _eval_process(files["small"], out, warm_env, "numba"),
    }
    found["first"] = interleaved(benchmark, {name: (run, 1) for name, run in sides.items()}, warm=False)


def _per_round(rounds: Rounds, value: Callable[[dict[str, float]], float]) -> Spread:
    """A figure computed from each round's seconds of every side (paired within the round): its median and range."""
    return Spread.of([value(dict(zip(rounds.seconds, seconds, strict=True)))
                      for seconds in zip(*rounds.seconds.values(), strict=True)])


def _verdict(value: float, target: float) -> str:
    return "met" if value <= target else "missed"


def _report(found: dict) -> str:
    parts = []
    rows = []
    for size in SIZES:
        if ("facts", size) not in found:
            continue
        facts: Rounds = found[("facts", size)]
        rows.append([f"{size:.0e}", *(facts.time(side).scaled(1e6 / size).cell(2) for side in ("old", "new", "floor")),
                     facts.ratio("old", "new").cell(1, "x"), facts.ratio("new", "floor").cell(2, "x"),
                     _verdict(facts.time("new").median / size * 1e6, 1.0)])
    if rows:
        headers = ["steps", "old builder us/step", "new builder (native) us/step", "touch-every-value floor us/step",
                   "old / new", "new / floor", "target <= 1 us/step"]
        parts.append(markdown_table(headers, rows)
                     + "\n\n" + FACTS_NOTE + " "
                     + describe(len(found[("facts", SIZES[0])]), "in-process", "1, every side"))
    if "read" in found:
        reads: Rounds = found["read"]
        parts.append(markdown_table(
            ["reading 1e5 steps of JSONL (24 MB)", "ms", "vs Arrow's parse (floor)", "vs json.loads, paused"],
            [[side, reads.time(side).scaled(1e3).cell(0), reads.ratio(side, ARROW_FLOOR).cell(2, "x"),
              reads.ratio(side, "json.loads, collector paused").cell(2, "x")] for side in reads.seconds])
            + "\n\nThe floor is Arrow's JSON reader given the same fields and nothing else (its multi-threaded "
            "parse into columns); `tracec score` adds the checks that decline a malformed file to the line reader "
            "(UTF-8, one object a line). json.loads of every line, single-threaded, is what a user's own loop "
            "pays. Target: the eval's reader <= 1.2x the floor. "
            + describe(len(reads), "in-process", "Arrow's readers all cores (2), the others 1"))
    if "write" in found:
        writes: Rounds = found["write"]
        parts.append(markdown_table(["writing the output of 1e5 steps", "ms"],
                                    [[side, writes.time(side).scaled(1e3).cell(0)] for side in writes.seconds])
                     + "\n\n" + describe(len(writes), "in-process", "1"))
    if "e2e" in found:
        e2e: Rounds = found["e2e"]
        rows = []
        jsonl = "eval jsonl -> parquet"
        for side, floor, target in ((jsonl, "floor jsonl", 1.2), (jsonl, JSON_LOADS_FLOOR, 1.5),
                                    ("eval parquet -> parquet", "floor parquet", None),
                                    ("eval arrow -> parquet", "floor arrow", None)):
            ratio = e2e.ratio(side, floor)
            rows.append([side, e2e.time(side).scaled(1e3).cell(0), floor, e2e.time(floor).scaled(1e3).cell(0),
                         ratio.cell(2, "x"), "" if target is None else f"<= {target}x: "
                         + _verdict(ratio.median, target)])
        parquet = e2e.time("eval parquet -> parquet").median
        table = markdown_table(["end to end, 1e5 steps", "ms", "floor", "floor ms", "vs floor", "target"], rows)
        parts.append(table + "\n\nIn-process: `score_file` (load the rubric, its kernel from the cache, read, "
                     "build facts, kernel, rewards, write). Floors, lower bounds of the same work: 'floor jsonl', "
                     "Arrow's own parse of the fields the rubric reads, then writing the output table; 'floor jsonl, "
                     "json.loads', every line parsed by json.loads (collector paused), then writing the output table; "
                     "Parquet and Arrow IPC, reading the file's bytes (from the page cache), then writing the output "
                     f"table. Parquet -> Parquet target <= 300 ms: {_verdict(parquet, 0.3)}. "
                     + describe(len(e2e), "in-process", f"Arrow's readers all cores ({os.cpu_count()}), the rest 1"))
    if "e2e-command" in found:
        command: Rounds = found["e2e-command"]
        eval_cost = lambda r: r["jsonl"] - r["jsonl, 1e4 steps"]
        floor_cost = lambda r: r["json.loads floor, 1e5 steps"] - r["json.loads floor, 1e4 steps"]
        eval_margin, floor_margin = _per_round(command, eval_cost), _per_round(command, floor_cost)
        ratio = _per_round(command, lambda r: eval_cost(r) / floor_cost(r))
        rows = [[f"`tracec score` {kind} -> parquet", command.time(kind).scaled(1e3).cell(0)]
                for kind in ("jsonl", "jsonl, 1e4 steps", "parquet")]
        rows += [[side, command.time(side).scaled(1e3).cell(0)] for side in command.seconds if "floor" in side]
        rows += [["`tracec score` jsonl, 1e5 minus 1e4 steps", eval_margin.scaled(1e3).cell(0)],
                 ["json.loads floor, 1e5 minus 1e4 steps", floor_margin.scaled(1e3).cell(0)],
                 ["marginal cost, `tracec score` / json.loads floor (target <= 1.5x)",
                  f"{ratio.cell(2, 'x')} {_verdict(ratio.median, 1.5)}"]]
        parts.append(markdown_table(["fresh processes (command)", "wall ms"], rows)
                     + "\n\nEach row a new process: `tracec eval` (interpreter, imports, rubric, kernel from the "
                     "cache, read, score, write), and the floor process: json.loads of every line with the collector "
                     "off, then writing the same output table with Parquet. 1e5 minus 1e4 steps is the marginal cost "
                     "of 9e4 steps, start-up cancelled, paired within each round. "
                     + describe(len(command), "command", "the command's own"))
    if "first" in found:
        first: Rounds = found["first"]
        empty = first.time("everything empty (auto)").median
        parts.append(markdown_table(["first `tracec score` of a process, 1e4 steps -> Parquet", "wall ms"],
                                    [[side, first.time(side).scaled(1e3).cell(0)] for side in first.seconds])
                     + "\n\n'Kernel cache empty' is a new TRACEC_CACHE_DIR, so the rubric's own kernel is built: by "
                     "the C compiler under `auto`, by Numba with `--backend numba`. 'Everything empty' also gives new "
                     "NUMBA_CACHE_DIR and XDG_CACHE_HOME folders, as a fresh container has them: the fixed reward "
                     "kernels are the package's C extension (tracec.runtime._fixed), compiled when it was built, and "
                     "the parser's tables lie beside the grammar (`make venv`). Target: <= 2 s with everything empty "
                     f"(auto): {_verdict(empty, 2.0)}. " + describe(len(first), "command", "the command's own"))
    return "\n\n".join(parts) + f"\n\nMachine load while measured: {load_average()} (1-minute average)."
