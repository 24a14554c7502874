"""The shipped examples: rubrics (`*.rubric`) and capability environments (`envs/*.rubric`), installed as package
data of `tracec.examples` so that `tracec demo` and the tests find them through `importlib.resources`."""
