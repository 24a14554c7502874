"""`tracec synth env | rubric`: LLM-written environments and operator libraries, checked, repaired, validated.

    tracec synth env --capability NAME --description TEXT -o OUT/ [--trajectories T...] [LLM flags]
    tracec synth env --selected selected_capabilities.json [--capability NAME] -o OUT/ [--trajectories T...]
                     [--tools FILE.json | --tools tau2:airline,retail]
    tracec synth rubric --schema FILE|toolenv --description TEXT -o OUT.rubric
                        [--trajectories T.jsonl] [--random-trajectories R.jsonl] [--env ENV.rubric] [LLM flags]

`synth env` tries the environment library first (`--library DIR`, default the installed `examples/envs`;
`--no-library`), then the LLM; calibration runs `--policy` (a local model, default smollm2-135m-instruct;
`--no-calibrate` skips it).
Exit 0 when an environment or rubric passed every check, 1 when none did (the message names the check and why;
every attempt is kept under the output), 2 on a usage error.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tracec.cli.errors import UsageError
from tracec.cli.llm_flags import add_llm_arguments, backend_settings
from tracec.cli.paths import output_file, work_folder
from tracec.dsl.env_model import MAX_STEPS
from tracec.trace_rl.llm.calls import LLMError
from tracec.trace_rl.llm.options import BackendChoiceError
from tracec.trace_rl.llm.repair import RepairFailed
from tracec.trace_rl.policy.catalog import ModelError
from tracec.trace_rl.targeting.analysis.cases import CaseError
from tracec.trace_rl.targeting.synth.reference import LIBRARY, MissingReference
from tracec.trace_rl.targeting.usage import UsageProblem

from tracec.arguments import integer, number

__all__ = ["USAGE_ERRORS", "USER_ERRORS", "add_arguments", "run"]
USAGE_ERRORS = (BackendChoiceError, UsageProblem)
# SynthFailed is named, not imported: its module is loaded only when a step runs (`--help` never pays for it).
USER_ERRORS = (CaseError, LLMError, RepairFailed, ModelError, "tracec.trace_rl.targeting.synth.commands:SynthFailed",
               MissingReference, "tracec.trace_rl.targeting.synth.tool_schemas:ToolsFileError")


def add_arguments(synth: argparse.ArgumentParser) -> None:
    steps = synth.add_subparsers(dest="step", required=True, metavar="STEP")

    env = steps.add_parser("env", help="an environment that trains one capability")
    env.add_argument("--capability", help="the capability's name (with --selected: which entry; default the top "
                     "PENDING one)")
    env.add_argument("--description", help="what the capability is (or @FILE)")
    env.add_argument("--selected", type=Path, help="a selected_capabilities.json: name, description and failed ids "
                     "come from it, and the entry is marked DONE on success")
    env.add_argument("--trajectories", nargs="*", type=Path, default=[],
                     help="trajectories whose failures (the entry's example ids, else any failed) are excerpted")
    env.add_argument("-o", "--output", type=Path, required=True, help="output folder")
    env.add_argument("--library", type=Path, help=f"environment library folder (default: the installed one, {LIBRARY})")
    env.add_argument("--no-library", action="store_true", help="always ask the LLM to write the environment")
    env.add_argument("--validate-seeds", type=integer(1), default=50,
                     help="seeds the environment is validated on (default 50)")
    env.add_argument("--tools", metavar="FILE.json|tau2[:DOMAINS]",
                     help="the target's tools the environment must keep: a JSON list of OpenAI-style function "
                     "schemas, or tau2-bench's (tau2, tau2:airline, tau2:retail); default: free tools")
    env.add_argument("--excerpts", type=integer(0), default=3, help="failure excerpts in the prompt (default 3)")
    calibration = env.add_argument_group("calibration")
    calibration.add_argument("--no-calibrate", action="store_true",
                             help="skip calibration: accept an environment the checks pass, unplayed")
    calibration.add_argument("--policy", default="smollm2-135m-instruct",
                             help="base policy: an installed model or checkpoint folder (tiny: the test model)")
    calibration.add_argument("--calibration-seeds", type=integer(1), default=8,
                             help="task seeds the policy plays (default 8)")
    calibration.add_argument("--group-size", type=integer(2), default=4,
                             help="episodes per seed, a GRPO group (default 4)")
    calibration.add_argument("--max-steps", type=integer(1, MAX_STEPS), default=None,
                             help=f"turns per rollout, 1..{MAX_STEPS} (default the env's)")
    calibration.add_argument("--policy-temperature", type=number(0), default=1.0,
                             help="the policy's sampling temperature (default 1.0)")
    calibration.add_argument("--policy-max-tokens", type=integer(1), default=128,
                             help="the policy's tokens per turn (default 128)")
    calibration.add_argument("--mean-band", type=number(0, 1), nargs=2, default=(0.2, 0.6), metavar=("LOW", "HIGH"),
                             help="the mean reward an acceptable environment gives the policy (default 0.2 0.6)")
    calibration.add_argument("--success-band", type=number(0, 1), nargs=2, default=(0.2, 0.6),
                             metavar=("LOW", "HIGH"), help="its success rate (default 0.2 0.6)")
    calibration.add_argument("--max-constant-groups", type=number(0, 1), default=0.5,
                             help="the largest share of groups whose episodes all score the same (default 0.5)")
    add_llm_arguments(env)

    rubric = steps.add_parser("rubric", help="a TRCA operator library for a benchmark's schema")
    rubric.add_argument("--schema", required=True, help="a .rubric file with the schema, or `toolenv`")
    rubric.add_argument("--schema-name", help="which schema of the file (default: its only one)")
    rubric.add_argument("--description", help="the benchmark's interaction type (or @FILE; with --env, default "
                        "its description)")
    rubric.add_argument("--trajectories", type=Path, help="recorded episodes (JSONL with `success`)")
    rubric.add_argument("--random-trajectories", type=Path, help="random-agent episodes (JSONL)")
    rubric.add_argument("--env", type=Path, help="record gold, do-nothing and random episodes of this environment")
    rubric.add_argument("--seeds", type=integer(1), default=20, help="with --env: seeds to record (default 20)")
    rubric.add_argument("-o", "--output", type=Path, required=True, help="the rubric (.rubric)")
    add_llm_arguments(rubric)


def run(args: argparse.Namespace) -> int:
    if args.step == "env":  # the output, before any LLM is called
        for flag, (low, high) in (("--mean-band", args.mean_band), ("--success-band", args.success_band)):
            if low > high:
                raise UsageError(f"{flag}: LOW {low:g} is above HIGH {high:g}; give the band as LOW HIGH")
        work_folder(args.output)
    else:
        read = (None if args.schema == "toolenv" else Path(args.schema), args.trajectories, args.random_trajectories,
                args.env)
        output_file(args.output, inputs=[path for path in read if path is not None])
    llm = backend_settings(args)  # flags that name no usable backend: said before any input is read
    from tracec.trace_rl.targeting.synth import commands

    if args.step == "env":
        return commands.env(
            args.output, capability=args.capability, description=args.description, selected=args.selected,
            trajectories=args.trajectories, excerpts=args.excerpts, library=args.library,
            use_library=not args.no_library, validate_seeds=args.validate_seeds, calibrate=not args.no_calibrate,
            policy=args.policy, calibration_seeds=args.calibration_seeds, group_size=args.group_size,
            max_steps=args.max_steps, policy_temperature=args.policy_temperature,
            policy_max_tokens=args.policy_max_tokens, mean_band=tuple(args.mean_band),
            success_band=tuple(args.success_band), max_constant_groups=args.max_constant_groups, tries=args.tries,
            llm=llm, tools=args.tools)
    return commands.rubric(args.output, schema=args.schema, schema_name=args.schema_name,
                           description=args.description, trajectories=args.trajectories,
                           random_trajectories=args.random_trajectories, environment=args.env, seeds=args.seeds,
                           tries=args.tries, llm=llm)
