"""`python -m tracec.cli ...`: the same command line as the `tracec` script."""

from tracec.cli import entry

entry()
