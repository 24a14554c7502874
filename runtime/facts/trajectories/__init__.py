"""Trajectory files: JSONL read into episodes (`jsonl`), the Arrow table schema (`table`), Arrow's readers and the
episode <-> table conversions (`arrow`), and reading or converting any of them by suffix (`files`)."""
