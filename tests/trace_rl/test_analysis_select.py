"""Contrastive selection: exact numbers on hand-made runs (k of n, ties, capabilities missing from runs, empty
denominators), a property test against a direct transcription of the formulas, and equality with TRACE's own
`selected_capabilities.json` on its ten released run files (read from ../shared, never copied)."""

from __future__ import annotations

import json
import random
import re
import statistics
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numerics import tolerance
from tracec.cli import main
from tracec.trace_rl.targeting.analysis.runs import BUCKETS, Run, RunFileError, read_run, run_files, write_run
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
