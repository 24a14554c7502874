"""What the TRACE commands (analysis, synthesis) share with the command line that runs them.

`UsageProblem` is inputs that parse but do not make sense together: the command line answers it as a usage error
(exit 2). `report` is a command's progress line, on stderr so that stdout keeps only what was asked for.
"""

from __future__ import annotations

import sys


class UsageProblem(Exception):
    """Inputs that parse but do not make sense (together)."""


def report(message: str) -> None:
    print(message, file=sys.stderr)
