"""Scored batches to disk: JSONL, or Parquet when the file name ends in `.parquet`; written atomically, so an error
halfway leaves the old file (or none), never half a file.

`write_scores` writes a `ScoredBatch` per step (episode, task, t, ops {name: 0|1}, r_F, r_B, r_TRCA, R, A_E, A_S,
A) straight from its arrays: the Parquet table is built column by column (`ops` a struct of one uint8 column per
operator, the rewards float64 columns, episode and task gathered from the per-episode strings), and JSONL is
formatted a chunk of steps at a time into the stream, each line exactly `json.dumps` of that step's record. Output is
always valid: a non-finite reward is refused with the step it belongs to (JSON has no NaN; a NaN in Parquet would
poison whatever reads it). Other records (trajectories, say) are written by `facts.trajectories.records`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tracec.dsl.errors import NOWHERE, DataError, Diagnostic
from tracec.runtime.facts.arrow_numpy import from_numpy, strings
from tracec.runtime.scored_batch import ScoredBatch

from tracec.atomic import atomic_open, atomic_path

REWARDS = ("r_F", "r_B", "r_TRCA", "R", "A_E", "A_S", "A")
OUTPUT_SUFFIXES = (".jsonl", ".parquet")
_LINES_PER_CHUNK = 4096


def write_scores(result: ScoredBatch, path: str | os.PathLike[str]) -> None:
    """Every step of `result` to `path` (JSONL or Parquet by its suffix); DataError for a non-finite reward."""
    _check_finite(result, os.fspath(path))
    if Path(path).suffix == ".parquet":
        table = scores_table(result)
        with atomic_path(path) as tmp:  # dictionary pages only where values repeat: trying it on floats is waste
            pq.write_table(table, tmp, use_dictionary=["episode", "task"])
        return
    with atomic_open(path) as handle:
        write_score_lines(result, handle)


def write_score_lines(result: ScoredBatch, handle: IO[str]) -> None:
    """Every step of `result` as one JSON object a line, into an open text stream (stdout, say)."""
    _check_finite(result, "<stdout>")
    for lines in _score_lines(result):
        handle.write(lines)


def scores_table(result: ScoredBatch) -> pa.Table:
    """The per-step table of `result`, built from its arrays."""
    batch, n = result.batch, result.batch.n_transitions
    step_episode = _episode_of_step(batch.episode_offsets)
    episode_of = from_numpy(step_episode)
    ops = pa.StructArray.from_arrays([from_numpy(result.fired[:, j]) for j in range(len(result.operator_names))],
                                     fields=[pa.field(name, pa.uint8()) for name in result.operator_names])
    if not result.operator_names:
        ops = pa.array([{}] * n, type=pa.struct([]))
    columns = {
        "episode": strings(batch.episodes).take(episode_of),
        "task": strings(batch.tasks).take(episode_of),
        "t": from_numpy(np.arange(n, dtype=np.int64) - batch.episode_offsets[step_episode]),
        "ops": ops,
    }
    for name in REWARDS:
        columns[name] = from_numpy(getattr(result.rewards, name))
    return pa.table(columns)


def _episode_of_step(offsets: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(offsets.size - 1, dtype=np.int64), np.diff(offsets))


def _check_finite(result: ScoredBatch, path: str) -> None:
    for name in REWARDS:
        values = getattr(result.rewards, name)
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            step = int(bad[0])
            episode = int(np.searchsorted(result.batch.episode_offsets, step, side="right")) - 1
            t = step - int(result.batch.episode_offsets[episode])
            message = (f"cannot write the results: `{name}` of episode {result.batch.episodes[episode]} step {t} is "
                       f"{values[step]}, which is not a finite number")
            raise DataError([Diagnostic(path, NOWHERE, message.encode("utf-8", "backslashreplace").decode())])


def _score_lines(result: ScoredBatch) -> Iterator[str]:
    """The JSONL text of `result`, a chunk of steps at a time: what `json.dumps(record)` gives, built per column."""
    batch = result.batch
    offsets = batch.episode_offsets
    heads = [f'{{"episode": {json.dumps(e)}, "task": {json.dumps(task)}, "t": '
             for e, task in zip(batch.episodes, batch.tasks)]
    names = [json.dumps(name) for name in result.operator_names]
    episode_of = _episode_of_step(offsets)
    t_of = np.arange(batch.n_transitions, dtype=np.int64) - offsets[episode_of]
    patterns, pattern_of = _op_patterns(result.fired)
    ops = ["{" + ", ".join(f"{name}: {bit}" for name, bit in zip(names, row)) + "}" for row in patterns.tolist()]
    template = '%s%d, "ops": %s, ' + ", ".join(f'"{name}": %r' for name in REWARDS) + "}\n"
    rewards = [getattr(result.rewards, name) for name in REWARDS]
    for lo in range(0, batch.n_transitions, _LINES_PER_CHUNK):
        hi = min(lo + _LINES_PER_CHUNK, batch.n_transitions)
        columns = [map(heads.__getitem__, episode_of[lo:hi].tolist()), t_of[lo:hi].tolist(),
                   map(ops.__getitem__, pattern_of[lo:hi].tolist())] + [r[lo:hi].tolist() for r in rewards]
        yield "".join(map(template.__mod__, zip(*columns)))


def _op_patterns(fired: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows of O (k, n_ops), index of each step's row (n_steps,)): rows repeat, so each is formatted once."""
    if fired.shape[1] == 0 or fired.shape[0] == 0:
        return np.zeros((1, fired.shape[1]), dtype=np.uint8), np.zeros(fired.shape[0], dtype=np.int64)
    packed = np.packbits(fired != 0, axis=1)  # (n, ceil(n_ops / 8)): a row as bytes
    keys = np.ascontiguousarray(packed).view(np.dtype((np.void, packed.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return (fired[first] != 0).astype(np.uint8), inverse.reshape(-1)
