"""tracec: the `.rubric` language, its compiled reward kernels, and the TRACE / TRCA training pipeline.

The packages live in top-level folders (`dsl/`, `compiler/`, `runtime/`, `trace_rl/`) and are installed under this
one namespace, `tracec.*`.
"""

__version__ = "0.1.0"
