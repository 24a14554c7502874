"""Contrastive selection: exact numbers on hand-made runs (k of n, ties, capabilities missing from runs, empty
denominators), a property test against a direct transcription of the formulas, and equality with TRACE's own
`selected_capabilities.json` on its ten released run files (read from ../shared, never copied).

`tracec analyze select` against a transcription of TRACE's `aggregate_capabilities.py` on TRACE-format run files
where runs omit capabilities (random runs, and the released runs with capabilities taken out), and its refusal of
runs labelled against different dictionaries, told apart by the dictionary each records."""

from __future__ import annotations

import json
import random
import re
import statistics
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numerics import tolerance
from tracec.cli import main
from tracec.trace_rl.targeting.analysis import commands
from tracec.trace_rl.targeting.analysis.dictionary import Capability, stamp
from tracec.trace_rl.targeting.analysis.runs import (
    BUCKETS,
    DictionaryStamp,
    Run,
    RunFileError,
    read_run,
    run_files,
    write_run,
)
from tracec.trace_rl.targeting.analysis.select import Thresholds, selected, summarize


def make_run(counts: dict[str, tuple[int, int, int, int]], *, failed: int = 10, passed: int = 10,
             index: int = 0) -> Run:
    """A run from (LF, PF, LP, PP) per capability; ids are made up, na buckets fill the rest."""
    labels = {}
    for skill, (lf, pf, lp, pp) in counts.items():
        ids = iter(f"t{index}-{i}" for i in range(10_000))
        labels[skill] = {"lacking_failed": tuple(next(ids) for _ in range(lf)),
                         "present_failed": tuple(next(ids) for _ in range(pf)),
                         "na_failed": tuple(next(ids) for _ in range(max(0, failed - lf - pf))),
                         "lacking_passed": tuple(next(ids) for _ in range(lp)),
                         "present_passed": tuple(next(ids) for _ in range(pp)),
                         "na_passed": tuple(next(ids) for _ in range(max(0, passed - lp - pp)))}
    return Run(path=f"run{index}", attempt=index, total_failed=failed, total_passed=passed, labels=labels)


def test_one_run_gives_the_formulas_exactly() -> None:
    (summary,) = summarize([make_run({"a": (3, 1, 1, 3)})], Thresholds(k=1))
    metrics = summary.per_run[0]
    assert metrics is not None
    assert (metrics.cov, metrics.er_minus, metrics.er_plus, metrics.delta) == (0.3, 0.75, 0.25, 0.5)
    assert metrics.passed and summary.passes_consistency and summary.std_cov == 0.0


def test_empty_denominators_count_as_zero() -> None:
    run = make_run({"none_applicable": (0, 0, 0, 0), "only_failures": (2, 0, 0, 0)}, failed=0, passed=3)
    by_name = {s.skill: s.per_run[0] for s in summarize([run], Thresholds(k=1))}
    assert by_name["none_applicable"] is not None and by_name["only_failures"] is not None
    assert (by_name["none_applicable"].cov, by_name["none_applicable"].delta) == (0.0, 0.0)
    # No failed trajectories in the totals: Cov is 0 whatever the lists say; ER- still counts its own lists.
    assert (by_name["only_failures"].cov, by_name["only_failures"].er_minus, by_name["only_failures"].er_plus) == \
        (0.0, 1.0, 0.0)


def test_thresholds_are_inclusive_and_both_must_hold() -> None:
    # Cov exactly rho and Delta exactly delta pass; 1/10 and 1/5 are exact in neither binary nor here, so use halves.
    thresholds = Thresholds(rho=0.5, delta=0.5, k=1)
    cases = {"both_at": (5, 0, 1, 1), "cov_below": (4, 0, 1, 1), "delta_below": (5, 1, 1, 1)}
    passed = {s.skill: s.per_run[0].passed for s in summarize([make_run(cases)], thresholds)}  # type: ignore[union-attr]
    assert passed == {"both_at": True, "cov_below": False, "delta_below": False}


def test_k_of_n_keeps_a_capability_passing_in_k_runs_and_drops_one_passing_in_k_minus_one() -> None:
    good, bad = (5, 1, 0, 5), (0, 5, 0, 5)
    runs = [make_run({"in_three": good if i < 3 else bad, "in_two": good if i < 2 else bad}, index=i)
            for i in range(4)]
    summaries = {s.skill: s for s in summarize(runs, Thresholds(k=3))}
    assert (summaries["in_three"].n_runs_passed, summaries["in_three"].passes_consistency) == (3, True)
    assert (summaries["in_two"].n_runs_passed, summaries["in_two"].passes_consistency) == (2, False)
    assert [s.skill for s in selected(summaries.values())] == ["in_three"]


def test_a_capability_missing_from_some_runs_is_averaged_over_the_runs_that_have_it() -> None:
    runs = [make_run({"always": (2, 2, 0, 2), "sometimes": (4, 0, 0, 2)}, index=0),
            make_run({"always": (4, 0, 0, 2)}, index=1),
            make_run({"always": (6, 2, 0, 2), "sometimes": (2, 2, 0, 2)}, index=2)]
    summaries = {s.skill: s for s in summarize(runs, Thresholds(k=2))}
    sometimes = summaries["sometimes"]
    assert sometimes.per_run[1] is None
    assert sometimes.mean_cov == (0.4 + 0.2) / 2
    assert sometimes.mean_delta == (1.0 + 0.5) / 2 and sometimes.std_delta == 0.25
    assert sometimes.n_runs_passed == 2 and sometimes.record()["n_runs_total"] == 3
    # The examples pool lacking_failed ids of every run that has the capability, sorted as text, first 8.
    assert list(sometimes.example_failed_cases) == sorted(["t0-0", "t0-1", "t0-2", "t0-3", "t2-0", "t2-1"])


def test_ties_in_mean_delta_keep_name_order() -> None:
    run = make_run({"zeta": (5, 0, 0, 5), "alpha": (5, 0, 0, 5), "mid": (5, 0, 1, 4)})
    assert [s.skill for s in selected(summarize([run], Thresholds(k=1)))] == ["alpha", "zeta", "mid"]


def _reference(runs: list[Run], rho: float, delta: float, k: int) -> dict[str, tuple]:
    """The selection written straight from the formulas, with exact fractions for the per-run values."""
    result = {}
    for skill in sorted({s for r in runs for s in r.labels}):
        covs, deltas, passes = [], [], 0
        for run in runs:
            if skill not in run.labels:
                continue
            n = {b: len(run.labels[skill][b]) for b in BUCKETS}
            cov = Fraction(n["lacking_failed"], run.total_failed) if run.total_failed else Fraction(0)
            applicable_f = n["lacking_failed"] + n["present_failed"]
            applicable_p = n["lacking_passed"] + n["present_passed"]
            er_minus = Fraction(n["lacking_failed"], applicable_f) if applicable_f else Fraction(0)
            er_plus = Fraction(n["lacking_passed"], applicable_p) if applicable_p else Fraction(0)
            covs.append(float(cov))
            deltas.append(float(er_minus) - float(er_plus))
            passes += float(cov) >= rho and float(er_minus) - float(er_plus) >= delta
        result[skill] = (statistics.fmean(covs), statistics.pstdev(covs), statistics.fmean(deltas),
                         statistics.pstdev(deltas), passes, passes >= k)
    return result


_COUNTS = st.tuples(*(st.integers(0, 6) for _ in range(4)))


@settings(max_examples=150, deadline=None)
@given(runs=st.lists(st.dictionaries(st.sampled_from(["a", "b", "c"]), _COUNTS, max_size=3), min_size=1, max_size=5),
       failed=st.integers(0, 12), k=st.integers(1, 5))
def test_selection_matches_a_direct_transcription(runs: list[dict], failed: int, k: int) -> None:
    made = [make_run(counts, failed=failed, index=i) for i, counts in enumerate(runs)]
    if not any(r.labels for r in made):
        return
    expected = _reference(made, 0.1, 0.2, k)
    # the rule (tests/numerics.py): means and population stds of <= 5 values in [-1, 1], in two orders (numpy's and
    # statistics' correctly rounded ones): a deviation carries the mean's n + 1 roundings, the std n + 2 more
    close = tolerance(2 * len(made) + 4, 1.0, float)
    for s in summarize(made, Thresholds(k=k)):
        mean_cov, std_cov, mean_delta, std_delta, passes, kept = expected[s.skill]
        assert (s.n_runs_passed, s.passes_consistency) == (passes, kept)
        for ours, theirs in ((s.mean_cov, mean_cov), (s.std_cov, std_cov), (s.mean_delta, mean_delta),
                             (s.std_delta, std_delta)):
            assert ours == pytest.approx(theirs, abs=close)


# ---------------------------------------------------------------- TRACE's released runs


@pytest.fixture(scope="module")
def trace_runs(shared_dir: Path) -> Path:
    return shared_dir / "data" / "trace_runs"


def test_trace_released_runs_reproduce_their_selection(trace_runs: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "selected.json"
    assert main(["analyze", "select", str(trace_runs), "-o", str(out)]) == 0
    ours, theirs = json.loads(out.read_text()), json.loads((trace_runs / "selected_capabilities.json").read_text())
    assert [o["skill"] for o in ours] == [t["skill"] for t in theirs]
    for o, t in zip(ours, theirs):
        # Later pipeline stages add fields and set status DONE (the first entry); everything the aggregator writes
        # is equal, floats to the last bit.
        assert {key: t[key] for key in o if key != "status"} == {key: v for key, v in o.items() if key != "status"}
        assert o["status"] == "PENDING" and t["status"] in ("PENDING", "DONE")
    table = capsys.readouterr().out
    assert "kept 6 of 9" in table and "information_gathering_before_action" in table
    png = out.with_suffix(".png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")


def test_run_layout_does_not_matter(trace_runs: Path, tmp_path: Path) -> None:
    original = [read_run(p) for p in run_files([trace_runs])]
    rng = random.Random(3)
    for run in original:  # rewrite each run with shuffled capability order and id order
        labels = {skill: {b: rng.sample(list(ids), len(ids)) for b, ids in run.labels[skill].items()}
                  for skill in rng.sample(list(run.labels), len(run.labels))}
        write_run(tmp_path / Path(run.path).name, attempt=run.attempt or 0, total_failed=run.total_failed,
                  total_passed=run.total_passed, labels=labels)
    again = [read_run(p) for p in run_files([tmp_path])]
    assert [s.record() for s in summarize(again)] == [s.record() for s in summarize(original)]


def test_bad_run_files_say_where(tmp_path: Path) -> None:
    broken = tmp_path / "run_01.json"
    broken.write_text('{"totals": {"total_failed": 3,}}')
    with pytest.raises(RunFileError, match=r"run_01.json:1:31: error: not JSON"):
        read_run(broken)
    broken.write_text('{"totals": {"total_failed": 3}, "labels": {"a": {"lacking_failed": "t1"}}}')
    with pytest.raises(RunFileError, match=r"labels.a.lacking_failed must be a list of trajectory ids"):
        read_run(broken)
    broken.write_text('{"totals": {"total_failed": -1}}')
    with pytest.raises(RunFileError, match=r"totals.total_failed must be a count"):
        read_run(broken)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RunFileError, match="needs run_\\*.json files"):
        run_files([empty])


def test_run_files_that_contradict_themselves_are_refused_not_averaged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each of these once printed a selection (mean Cov 3.000 for three failures listed against one counted)."""
    contradictions = {
        '{"attempt": 1}': r"`labels` is missing or empty",
        '{"totals": {"total_failed": 1}, "labels": {"c": {"lacking_failed": ["a", "b", "c"]}}}':
            r"labels.c lists 3 failed trajectories \(lacking_failed 3, present_failed 0, na_failed 0\) but "
            r"totals.total_failed is 1",
        '{"totals": {"total_failed": 1}, "labels": {"c": {"lacking_failed": ["a"], "present_failed": ["a"], '
        '"na_failed": ["a"]}}}': r"labels.c: trajectory 'a' is in both lacking_failed and present_failed",
        '{"totals": {"total_failed": 1, "total_passed": 1}, "labels": {"c": {"lacking_failed": ["a"]}, '
        '"d": {"na_passed": ["a"]}}}': r"trajectory 'a' is in labels.c.lacking_failed and in labels.d.na_passed",
    }
    run, out = tmp_path / "r1.json", tmp_path / "selected.json"
    for text, message in contradictions.items():
        run.write_text(text)
        with pytest.raises(RunFileError, match=f"^{re.escape(str(run))}: error: {message}"):
            read_run(run)
        assert main(["analyze", "select", str(run), "--k", "1", "-o", str(out)]) == 1
        assert re.search(message, capsys.readouterr().err) and not out.exists()


def test_select_command_errors_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run_01.json").write_text("[]")
    assert main(["analyze", "select", str(tmp_path), "-o", str(tmp_path / "s.json")]) == 1
    assert "a run file is a JSON object" in capsys.readouterr().err
    assert main(["analyze", "select", str(tmp_path), "--rho", "2", "-o", str(tmp_path / "s.json")]) == 2
    assert main(["analyze", "select", "-o", str(tmp_path / "s.json")]) == 2  # no RUNS
    assert not (tmp_path / "s.json").exists()


def test_select_says_when_k_is_above_the_runs_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The default --k 8 keeps nothing from a rubric's single run; select says why and how to keep some."""
    run = make_run({"careful": (8, 0, 0, 8)}, failed=8, passed=8)
    write_run(tmp_path / "run_01.json", attempt=1, total_failed=8, total_passed=8, labels=run.labels)
    out = tmp_path / "selected.json"
    assert main(["analyze", "select", str(tmp_path / "run_01.json"), "-o", str(out)]) == 0
    assert json.loads(out.read_text()) == []
    assert ("select: note: --k 8 is more than the 1 run(s) given, so no capability can be kept; pass --k 1 or less"
            in capsys.readouterr().err)
    assert main(["analyze", "select", str(tmp_path / "run_01.json"), "-o", str(out), "--k", "1"]) == 0
    assert "note:" not in capsys.readouterr().err and [s["skill"] for s in json.loads(out.read_text())] == ["careful"]


def test_bad_dictionary_records_say_where(tmp_path: Path) -> None:
    run = tmp_path / "run_01.json"
    labels = '"labels": {"a": {"lacking_failed": ["t1"]}}, "totals": {"total_failed": 1}'
    records = {'"x"': r"`dictionary` must be a JSON object",
               '{"capabilities": ["a"]}': r"dictionary.fingerprint must be a non-empty string",
               '{"fingerprint": "f", "capabilities": []}': r"dictionary.capabilities must be a non-empty",
               '{"fingerprint": "f", "capabilities": ["a"], "file": 3}': r"dictionary.file must be a string",
               '{"fingerprint": "f", "capabilities": ["b"]}': r"labels.a is not a capability of the dictionary"}
    for record, message in records.items():
        run.write_text(f'{{"dictionary": {record}, {labels}}}')
        with pytest.raises(RunFileError, match=f"^{re.escape(str(run))}: error: {message}"):
            read_run(run)


# ---------------------------------------------------------------- select as TRACE aggregates, on runs that omit


def trace_aggregation(runs: list[dict[str, Any]], rho: float, delta: float, k: int,
                      descriptions: dict[str, str]) -> list[dict[str, Any]]:
    """TRACE's `pipeline/aggregate_capabilities.py` (commit e3418fc), written down again from its text over the run
    files' JSON as they are: per run and capability Cov, ER-, ER+ and Delta; a capability's means and population
    stds (numpy's, as TRACE's) over the runs that label it; a run passes when it labels the capability and
    Cov >= rho and Delta >= delta; kept when it passes in k runs; examples the first 8 of the sorted union of
    lacking_failed ids; kept ones sorted by mean Delta, largest first (a stable sort over names)."""
    def metrics(buckets: dict[str, list[str]], totals: dict[str, int]) -> tuple[float, float]:
        lf, pf = len(buckets.get("lacking_failed", [])), len(buckets.get("present_failed", []))
        lp, pp = len(buckets.get("lacking_passed", [])), len(buckets.get("present_passed", []))
        failed = totals.get("total_failed", 0)
        cov = lf / failed if failed > 0 else 0.0
        er_minus = lf / (lf + pf) if lf + pf > 0 else 0.0
        er_plus = lp / (lp + pp) if lp + pp > 0 else 0.0
        return cov, er_minus - er_plus

    per_run = [{cap: metrics(b, run.get("totals", {})) for cap, b in run.get("labels", {}).items()} for run in runs]
    summary = []
    for cap in sorted({cap for m in per_run for cap in m}):
        covs = [m[cap][0] for m in per_run if cap in m]
        deltas = [m[cap][1] for m in per_run if cap in m]
        passes = sum(cap in m and m[cap][0] >= rho and m[cap][1] >= delta for m in per_run)
        failed = {i for run in runs if cap in run["labels"] for i in run["labels"][cap].get("lacking_failed", [])}
        summary.append({"skill": cap, "description": descriptions.get(cap, ""),
                        "mean_cov": float(np.mean(covs)), "std_cov": float(np.std(covs)),
                        "mean_delta": float(np.mean(deltas)), "std_delta": float(np.std(deltas)),
                        "n_runs_passed": passes, "n_runs_total": len(runs), "passes_consistency": passes >= k,
                        "example_failed_cases": sorted(failed)[:8], "status": "PENDING"})
    return sorted((s for s in summary if s["passes_consistency"]), key=lambda s: -s["mean_delta"])


def select_files(paths: list[Path], out: Path, rho: float, delta: float, k: int, *more: str) -> list[dict[str, Any]]:
    assert main(["analyze", "select", *map(str, paths), "--rho", repr(rho), "--delta", repr(delta), "--k", str(k),
                 "-o", str(out), *more]) == 0
    chosen: list[dict[str, Any]] = json.loads(out.read_text())
    return chosen


_SKILLS = ("alpha", "beta", "gamma", "delta_skill")


@st.composite
def trace_format_runs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """1-5 runs over one set of trajectories, each labelling its own non-empty subset of the capabilities (in any
    order): every trajectory NA, PRESENT or LACKING per capability, or (as TRACE's reader allows) not listed."""
    trajectories = [(f"f{i}", "failed") for i in range(draw(st.integers(0, 5)))] + \
                   [(f"p{i}", "passed") for i in range(draw(st.integers(0, 5)))]
    runs = []
    for attempt in range(1, draw(st.integers(1, 5)) + 1):
        labels: dict[str, dict[str, list[str]]] = {}
        for skill in draw(st.lists(st.sampled_from(_SKILLS), min_size=1, max_size=len(_SKILLS), unique=True)):
            buckets: dict[str, list[str]] = {}
            for trajectory, side in trajectories:
                label = draw(st.sampled_from(("NA", "PRESENT", "LACKING", None)))
                if label is not None:
                    buckets.setdefault(f"{label.lower()}_{side}", []).append(trajectory)
            labels[skill] = buckets
        runs.append({"attempt": attempt, "totals": {"total_failed": sum(s == "failed" for _, s in trajectories),
                                                    "total_passed": sum(s == "passed" for _, s in trajectories)},
                     "labels": labels})
    return runs


@settings(max_examples=80, deadline=None)
@given(runs=trace_format_runs(), rho=st.sampled_from([0.0, 0.1, 0.25, 0.5]),
       delta=st.sampled_from([-0.5, 0.0, 0.2, 0.5]), k=st.integers(1, 6))
def test_select_equals_trace_aggregation_on_runs_that_omit_capabilities(runs: list[dict[str, Any]], rho: float,
                                                                         delta: float, k: int) -> None:
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(commands, "write_chart", lambda *args: None)  # the chart has its own test; this one is numbers
        paths = [Path(folder) / f"run_{i:02d}.json" for i in range(1, len(runs) + 1)]
        for path, run in zip(paths, runs):
            path.write_text(json.dumps(run))
        assert select_files(paths, Path(folder) / "selected.json", rho, delta, k) == \
            trace_aggregation(runs, rho, delta, k, {})


_RELEASED_OMISSIONS = {
    "none": {},
    "one run omits a kept capability": {4: ["policy_constraint_enforcement"]},
    "two runs omit one passing in 9 of 10": {1: ["policy_constraint_enforcement"],
                                             2: ["policy_constraint_enforcement"]},
    "three runs omit one passing in all": {3: ["multi_step_transaction_completion"],
                                           7: ["multi_step_transaction_completion", "aggregation_across_records"],
                                           9: ["multi_step_transaction_completion"]},
    "each run omits another": {r: ["policy_constraint_enforcement", "multi_step_transaction_completion",
                                   "numerical_and_payment_reasoning", "constraint_aware_option_selection",
                                   "claim_verification_against_system", "conditional_instruction_following",
                                   "information_gathering_before_action", "aggregation_across_records",
                                   "handling_concurrent_user_intents"][r % 9:r % 9 + 1 + r // 10]
                               for r in range(1, 11)},
}


@pytest.mark.parametrize("omitted", _RELEASED_OMISSIONS.values(), ids=_RELEASED_OMISSIONS.keys())
def test_select_equals_trace_aggregation_on_released_runs_with_capabilities_taken_out(
        trace_runs: Path, tmp_path: Path, omitted: dict[int, list[str]]) -> None:
    runs = []
    for number in range(1, 11):
        run = json.loads((trace_runs / f"run_{number:02d}.json").read_text())
        for skill in omitted.get(number, []):
            del run["labels"][skill]
        (tmp_path / f"run_{number:02d}.json").write_text(json.dumps(run))  # TRACE's format: no dictionary recorded
        runs.append(run)
    candidates = trace_runs / "candidate_capabilities.json"
    descriptions = {c["name"]: c["description"] for c in json.loads(candidates.read_text())["candidates"]}
    expected = trace_aggregation(runs, 0.10, 0.20, 8, descriptions)
    ours = select_files(sorted(tmp_path.glob("run_*.json")), tmp_path / "selected.json", 0.10, 0.20, 8,
                        "--candidates", str(candidates))
    assert ours == expected and all(s["n_runs_total"] == 10 for s in ours)
    if not omitted:
        assert [s["skill"] for s in ours] == \
            [s["skill"] for s in json.loads((trace_runs / "selected_capabilities.json").read_text())]


# ---------------------------------------------------------------- runs of different dictionaries


A = [Capability(name="careful", description="checks first"), Capability(name="thorough", description="finishes")]
B = [Capability(name="careful", description="checks first, then asks"), *A[1:]]  # one description differs


def stamped_run(path: Path, dictionary: DictionaryStamp | None, skills: list[str]) -> Path:
    write_run(path, attempt=1, total_failed=4, total_passed=4, dictionary=dictionary,
              labels={s: {"lacking_failed": ["f0", "f1", "f2"], "present_failed": ["f3"],
                          "present_passed": ["p0", "p1", "p2", "p3"]} for s in skills})
    return path


def test_runs_of_different_dictionaries_are_refused_naming_both(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    first = stamped_run(tmp_path / "run_01.json", stamp(A, "runs/a.json"), ["careful", "thorough"])
    second = stamped_run(tmp_path / "run_02.json", stamp(B, "runs/b.json"), ["careful", "thorough"])
    out = tmp_path / "selected.json"
    assert main(["analyze", "select", str(tmp_path), "--k", "1", "-o", str(out)]) == 2
    said = capsys.readouterr().err
    assert (f"tracec analyze: error: {second}: labelled against dictionary runs/b.json (fingerprint "
            f"{stamp(B).fingerprint}), but {first} against dictionary runs/a.json (fingerprint "
            f"{stamp(A).fingerprint}); select compares runs of one dictionary") in said
    assert not out.exists() and not out.with_suffix(".png").exists()


def test_runs_of_one_dictionary_may_omit_capabilities_wherever_its_file_lies(tmp_path: Path) -> None:
    """Told apart by the dictionary they record, not by what each labelled: a copy (reordered, elsewhere) is the
    same dictionary, and a run that records none is taken to be of it while it labels only its capabilities."""
    paths = [stamped_run(tmp_path / "run_01.json", stamp(A, "a.json"), ["careful", "thorough"]),
             stamped_run(tmp_path / "run_02.json", stamp(A[::-1], "copy/of/a.json"), ["thorough"]),
             stamped_run(tmp_path / "run_03.json", None, ["careful"])]
    runs = [json.loads(p.read_text()) for p in paths]
    assert select_files(paths, tmp_path / "selected.json", 0.1, 0.2, 1) == trace_aggregation(runs, 0.1, 0.2, 1, {})
    assert read_run(paths[0]).dictionary == stamp(A, "a.json")  # written and read back whole


def test_a_run_that_records_no_dictionary_is_refused_beside_one_that_lacks_its_capability(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recorded = stamped_run(tmp_path / "run_01.json", stamp(A, "a.json"), ["careful"])
    old = stamped_run(tmp_path / "run_02.json", None, ["careful", "elsewhere"])
    assert main(["analyze", "select", str(tmp_path), "--k", "1", "-o", str(tmp_path / "selected.json")]) == 2
    assert (f"{old}: records no dictionary and labels elsewhere, which dictionary a.json (fingerprint "
            f"{stamp(A).fingerprint}) of {recorded} lacks") in capsys.readouterr().err
    old.unlink()  # runs that all record none are TRACE's: taken as one dictionary's, whatever each labels
    stamped_run(tmp_path / "run_01.json", None, ["careful"])
    stamped_run(tmp_path / "run_02.json", None, ["elsewhere"])
    assert main(["analyze", "select", str(tmp_path), "--k", "1", "-o", str(tmp_path / "selected.json")]) == 0
