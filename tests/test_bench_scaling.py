"""bench/scaling.py: the operators curve's larger programs are larger work (no operator repeats another, the
schedule's distinct steps grow) and compute what the interpreter does; a memory figure sees the phase's outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tracec.compiler import interp
from tracec.compiler.backends import Backend, compile_kernel
from tracec.compiler.cache import KernelCache
from tracec.compiler.codegen import schedule

from bench.scaling import OPERATOR_COUNTS, operator_programs
from bench.test_kernels_bench import household, make_facts

REPO = Path(__file__).resolve().parents[1]


def test_larger_programs_repeat_no_operator_and_schedule_more_steps() -> None:
    programs = operator_programs()
    assert list(programs) == list(OPERATOR_COUNTS)
    steps = [len(schedule(program).steps) for program in programs.values()]
    for count, program in programs.items():
        assert len(set(program.operators)) == count == len(program.operators)
        assert program.context == household().context
    assert steps == sorted(set(steps)), steps
    assert programs[15].operators == household().operators


@pytest.mark.parametrize("backend", ["c", "numba"])
def test_every_program_computes_what_the_interpreter_does(backend: Backend, tmp_path: Path) -> None:
    n = 300
    facts = make_facts(n, seed=7)
    for program in operator_programs().values():
        kernel = compile_kernel(program, backend, KernelCache(tmp_path))
        np.testing.assert_array_equal(kernel.run(facts, n)[0], interp.run(program, facts, n)[0])


def test_a_phase_peak_holds_its_outputs(tmp_path: Path) -> None:
    n = 200_000
    done = subprocess.run([sys.executable, "bench/scaling.py", "--child", "rewards", str(n), str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["outputs"] == 7 * 8 * n  # the seven float64 rows of one block
    assert figures["outputs"] * 0.9 <= figures["peak"] - figures["before"] < 3 * figures["outputs"]
