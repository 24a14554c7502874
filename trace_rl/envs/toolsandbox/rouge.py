"""ROUGE-L F-measure as the `rouge_score` package computes it with `use_stemmer=True`: the benchmark's measure
for free text (what the agent tells the user, a message's or a reminder's content, a contact's relationship).

Tokens: the text lowercased, every run of characters other than a-z and 0-9 a separator, tokens longer than 3
characters Porter-stemmed. Score: the longest common subsequence of the token lists, `P = lcs / len(prediction)`,
`R = lcs / len(target)`, `F = 2PR / (P + R)`, 0 when either side has no tokens.
"""

from __future__ import annotations

import re

from tracec.trace_rl.envs.toolsandbox.fuzzy import lcs_length
from tracec.trace_rl.envs.toolsandbox.porter import stem

_SEPARATORS = re.compile(r"[^a-z0-9]+")


def tokens(text: str) -> list[str]:
    words = _SEPARATORS.sub(" ", text.lower()).split()
    return [stem(word) if len(word) > 3 else word for word in words]


def rouge_l(target: str, prediction: str) -> float:
    wanted, got = tokens(target), tokens(prediction)
    if not wanted or not got:
        return 0.0
    common = lcs_length(wanted, got)
    if common == 0:
        return 0.0
    precision, recall = common / len(got), common / len(wanted)
    return 2 * precision * recall / (precision + recall)
