"""tracec: the `.rubric` language, its compiled reward kernels, and the TRACE / TRCA training pipeline.

The packages live in top-level folders (`dsl/`, `compiler/`, `runtime/`, `trace_rl/`, `cli/`) and are installed under
this one namespace, `tracec.*`. This folder is the bottom layer every other one may import: the version, atomic
file writes, the cache root and the flags' argparse types, and nothing that imports the rest (the command line lives
in `cli/`, at the top). One exception sits just above `dsl/`: `config_io`, typed settings read from TOML, which
decodes a file's text as the language decodes a source (docs/architecture.md).
"""

__version__ = "0.1.0"
