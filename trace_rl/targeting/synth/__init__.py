"""Synthesis with an LLM: capability environments (`tracec synth env`) and TRCA operator libraries
(`tracec synth rubric`), each written by the model, checked by the compiler, repaired, then validated.

- `library.py`: the shipped environments a capability can use before any LLM is asked;
- `env.py`: writing an environment: the prompt, the check-validate-calibrate loop;
- `tool_schemas.py`: the target's tools as JSON schemas, and whether an environment keeps them;
- `rollouts.py`: episodes of an environment played by scripted agents or by a policy model;
- `calibration.py`: whether a base policy's rewards make a usable GRPO signal (TRACE's calibration report);
- `rubric.py`: writing an operator library, and validating its operators on recorded episodes;
- `commands.py`: what `tracec synth env | rubric` run (the command line is `cli/synth.py`).
"""
