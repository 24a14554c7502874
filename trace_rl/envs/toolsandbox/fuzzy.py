"""Fuzzy string scores as the benchmark's searches use them (rapidfuzz's `WRatio`, `partial_ratio`, `extract`).

Scores are 0..100 from the Indel distance (`ratio = 200 * LCS / (len_a + len_b)`). `default_process` lowercases,
turns every non-alphanumeric character into a space and trims. `weighted_ratio` is WRatio: the plain ratio
when the lengths are close, else the best partial or token ratio, each scaled down (0.95 for tokens, 0.9 or 0.6
for partial matches). `extract` keeps the rows scoring at least the cutoff, best first, at most 5, as
`process.extract`'s default limit does.
Left out: rapidfuzz's score_hint and cutoff short-cuts (they change speed, not scores).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_NOT_ALNUM = re.compile(r"[^0-9a-zA-Z]+", re.UNICODE)
EXTRACT_LIMIT = 5


def default_process(text: str) -> str:
    return _NOT_ALNUM.sub(" ", text).lower().strip()


def ratio(a: str, b: str) -> float:
    if not a and not b:
        return 100.0
    return 200.0 * lcs_length(a, b) / (len(a) + len(b))


def partial_ratio(a: str, b: str) -> float:
    """The best ratio of the shorter string against every window of the longer one (the edges included)."""
    if not a or not b:
        return 0.0
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    n = len(short)
    windows = [long[max(0, end - n):end] for end in range(1, len(long) + n)]
    best = max(ratio(short, window) for window in windows if window)
    if len(a) == len(b):
        best = max(best, max(ratio(b, a[max(0, end - n):end]) for end in range(1, 2 * n)))
    return best


def token_sort_ratio(a: str, b: str) -> float:
    return ratio(_sorted_tokens(a), _sorted_tokens(b))


def token_set_ratio(a: str, b: str) -> float:
    tokens_a, tokens_b = set(a.split()), set(b.split())
    if not tokens_a or not tokens_b:
        return 0.0
    common = " ".join(sorted(tokens_a & tokens_b))
    only_a, only_b = " ".join(sorted(tokens_a - tokens_b)), " ".join(sorted(tokens_b - tokens_a))
    if common and (not only_a or not only_b):
        return 100.0
    with_a = f"{common} {only_a}".strip()
    with_b = f"{common} {only_b}".strip()
    scores = [ratio(with_a, with_b)]
    if common:
        scores += [ratio(common, with_a), ratio(common, with_b)]
    return max(scores)


def partial_token_ratio(a: str, b: str) -> float:
    tokens_a, tokens_b = set(a.split()), set(b.split())
    if not tokens_a or not tokens_b:
        return 0.0
    if tokens_a & tokens_b:
        return 100.0
    return max(partial_ratio(_sorted_tokens(a), _sorted_tokens(b)),
               partial_ratio(" ".join(sorted(tokens_a - tokens_b)), " ".join(sorted(tokens_b - tokens_a))))


def weighted_ratio(a: str, b: str) -> float:
    """rapidfuzz's WRatio on already processed strings."""
    if not a or not b:
        return 0.0
    length_ratio = max(len(a), len(b)) / min(len(a), len(b))
    best = ratio(a, b)
    if length_ratio < 1.5:
        return max(best, max(token_sort_ratio(a, b), token_set_ratio(a, b)) * 0.95)
    partial_scale = 0.9 if length_ratio <= 8.0 else 0.6
    best = max(best, partial_ratio(a, b) * partial_scale)
    return max(best, partial_token_ratio(a, b) * 0.95 * partial_scale)


def extract(query: str, choices: Sequence[str | None], cutoff: float) -> list[int]:
    """Indices of the choices whose WRatio against the query reaches the cutoff, best first, at most 5."""
    wanted = default_process(query)
    scored = [(weighted_ratio(wanted, default_process(choice)), index) for index, choice in enumerate(choices)
              if choice is not None]
    kept = sorted(((score, index) for score, index in scored if score >= cutoff), key=lambda s: (-s[0], s[1]))
    return [index for _, index in kept[:EXTRACT_LIMIT]]


def _sorted_tokens(text: str) -> str:
    return " ".join(sorted(text.split()))


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two strings (the Indel similarity) or of two token lists
    (ROUGE-L), one row of the table at a time."""
    if len(a) < len(b):
        a, b = b, a
    row = [0] * (len(b) + 1)
    for char in a:
        diagonal = 0
        for j, other in enumerate(b, start=1):
            above = row[j]
            row[j] = diagonal + 1 if char == other else max(row[j], row[j - 1])
            diagonal = above
    return row[-1]
