"""The runtime of compiled rubrics, in rooms that import downwards only: `facts/` (trajectory files and episodes to
the fact columns a kernel reads), `rewards/` (TRCA rewards, returns, advantages and exact context groups, and the
fixed kernels they run), and on top the scoring API (`scoring`: a rubric scorer; `scored_batch`: its result;
`output`: results to disk) and capability labels (`capabilities`). The C extensions (`_gather`, `_fixed`) are built
here by setup.py."""
