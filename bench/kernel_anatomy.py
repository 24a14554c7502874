"""Where the household C kernel's time goes at 10^6 steps on one thread: the shipped kernel against the same
generated source with parts taken out, and against its read-once memory floor.

    python bench/kernel_anatomy.py [--steps 1000000] [--rounds 5] [--record]

The kernel (bench/test_kernels_bench.py's 15-operator household program) is compiled from
`c_backend.generate_source` as shipped, then from that source with its loops over set elements deleted:
- 'no membership scans': the six `has` scans (one loop per set column, answering every test on that set) gone, so
  their flags stay false; the set equality and the context key's loop over `prev.holding` stay;
- 'no loop over set elements': also the set equality and the context hash's loop gone (it hashes the set's length
  only);
- 'branch-free scans, 8 lanes': each membership scan as 8 unrolled lanes, each reading element lo + q at an index
  clamped into the column (so no lane reads outside it) and masked by q < length, then the ordinary loop for any
  element past the eighth (none here: the sets hold at most 6): the same O and keys as shipped, with no loop exit to
  mispredict.
The variants without scans compute wrong answers on purpose: they time what the scans cost, nothing else. The floor
(bench/floors.py) reads every column the kernel reads once and writes O and the keys. Measured by bench/sides.py
(interleaved rounds, medians, paired ratios); the C kernels run one OpenMP thread. Writes RESULTS.md's section
"kernel anatomy".
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracec.compiler.c_backend import CKernel, _build, _open, compiler_command, generate_source, pointers
from tracec.compiler.kernel_abi import allocate, marshal

from bench.floors import read_write_floor
from bench.results import markdown_table, record
from bench.sides import Rounds, describe, interleaved, load_average
from bench.test_kernels_bench import household, make_facts, omp_threads

COMMAND = "python bench/kernel_anatomy.py --record"
LANES = 8
SCAN = re.compile(r"for \(int64_t j = (\w+); j < (\w+); j\+\+\) \{ const int64_t e = (\w+)\[j\]; ([^}]*) \}")
EQUALITY = re.compile(r"for \(int64_t j = 0; m\d+ && j < [^;]*; j\+\+\) m\d+ = [^;]*;")
HASH_LOOP = re.compile(r"for \(int64_t j = \w+; j < \w+; j\+\+\) h = TRACEC_MIX\(h, \w+\[j\]\);")
SHIPPED, NO_SCANS, NO_LOOPS, LANED, FLOOR = ("shipped", "no membership scans", "no loop over set elements",
                                             f"branch-free scans, {LANES} lanes", "memory floor")


def _replaced(pattern: re.Pattern[str], replacement: str | Callable[[re.Match[str]], str], source: str) -> str:
    changed, count = pattern.subn(replacement, source)
    if not count:  # the generator's output changed shape: this anatomy no longer takes the loop out
        raise RuntimeError(f"no match for {pattern.pattern} in the generated kernel")
    return changed


def _lanes(match: re.Match[str]) -> str:
    lo, hi, values, checks = match.groups()
    masked = re.sub(r"(\w+) \|= e == (\w+);", r"\1 |= in & (e == \2);", checks)
    lanes = " ".join(f"{{ const int64_t at = {lo} + {q}; const int in = at < {hi}; int64_t ix = in ? at : {hi} - 1; "
                     f"ix = ix > 0 ? ix : 0; const int64_t e = {values}[ix]; {masked} }}" for q in range(LANES))
    rest = f"for (int64_t j = {lo} + {LANES}; j < {hi}; j++) {{ const int64_t e = {values}[j]; {checks} }}"
    return f"{lanes} {rest}"


def variants(source: str) -> dict[str, str]:
    without_scans = _replaced(SCAN, "", source)
    return {SHIPPED: source, NO_SCANS: without_scans,
            NO_LOOPS: _replaced(HASH_LOOP, "", _replaced(EQUALITY, "", without_scans)),
            LANED: _replaced(SCAN, _lanes, source)}


def _kernel(source: str) -> CKernel:
    return _open(_build(source, Path(tempfile.mkdtemp(prefix="tracec-anatomy-")), compiler_command()), True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10**6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--record", action="store_true", help="write bench/RESULTS.md's section")
    args = parser.parse_args()
    n, program = args.steps, household()
    facts = make_facts(n, seed=1)
    kernels = {name: _kernel(source) for name, source in variants(generate_source(program)).items()}
    shipped = kernels[SHIPPED]
    omp_threads(shipped)(1)  # one OpenMP runtime in the process: this sets every variant's threads
    reference = shipped.run(facts, n)
    laned = kernels[LANED].run(facts, n)
    np.testing.assert_array_equal(laned[0], reference[0])
    np.testing.assert_array_equal(laned[1].hash, reference[1].hash)  # type: ignore[union-attr]
    arrays = marshal(shipped.columns, facts, n)
    outputs = allocate(n, shipped.n_operators, bool(shipped.context), sum(c is None for c, _ in shipped.context))
    arguments = pointers([*arrays, *outputs.arrays()])  # the kernels alone: inputs marshalled, outputs reused

    def calling(kernel: CKernel) -> Callable[[], None]:
        return lambda: kernel.function(n, *arguments)

    sides: dict[str, tuple[Callable[[], object], int]] = {name: (calling(k), 5) for name, k in kernels.items()}
    written = [((shipped.n_operators,), np.uint8), ((), np.int64)]
    sides[FLOOR] = (lambda: read_write_floor(arrays, n, written, 1), 5)
    rounds = interleaved(None, sides, args.rounds)
    report = _report(rounds, n, args.rounds)
    print(report)
    if args.record:
        record("kernel anatomy", report, COMMAND)


def _report(rounds: Rounds, n: int, count: int) -> str:
    shipped = rounds.time(SHIPPED).median
    rows = [[name, rounds.time(name).scaled(1e9 / n).cell(1), f"{rounds.time(name).median / shipped:.0%}",
             rounds.ratio(name, FLOOR).cell(2, "x")] for name in rounds.seconds]
    return "\n".join([
        markdown_table(["household C kernel, 1 thread", "ns a step", "of the shipped time", "vs the floor"], rows),
        "",
        (f"{n:.0e} steps, the kernels' own calls (inputs marshalled and outputs allocated once, outside the timing). "
         + describe(count, "in-process", "1 (one OpenMP thread)") + f" Load average (1 min): {load_average()}."),
        "",
        ("The variants without scans compute wrong answers on purpose: they time what the loops over set elements "
         "cost. What is left without them reads the scalar columns, the known flags and the offsets and computes "
         "every flag; the loops over a transition's set elements (about 13 here, in 8 loops of 0 to 6 elements) are "
         "the rest. The branch-free variant gives the same O and keys with no loop exit to mispredict; where it is "
         "no faster, the scans' cost is their instructions and loads, not mispredicted exits. Measured once under "
         "cachegrind (`valgrind --tool=cachegrind --branch-sim=yes`, 10^6 steps): the shipped kernel executes about "
         "470 instructions and 20 branches a step, and its code (`gcc -S`) reloads the column pointers from the "
         "stack every step: its 40 arrays outnumber the registers."),
    ])


if __name__ == "__main__":
    main()
