"""`tracec route`: the adapter the base model routes a task to, and the label logits that chose it.

    tracec route --run runs/pipeline --task "Hi, I'm Ana. Please cancel order O12 ..."
    tracec route --run runs/pipeline --target capability --env examples/envs/multi_step_completion.rubric --seed 3
    tracec route --adapter pv=DIR --adapter msc=DIR --options options.json --task @task.txt --json
    tracec route --run runs/pipeline --task @task.txt --top-p 0.9 --retrieve-k 5 --index runs/pipeline/route/index.jsonl

The task is given as text (`--task TEXT` or `--task @FILE`), or as the first message of a target's task `--seed`
(the arguments of `tracec evaluate`). stdout: the choice, then one line per option (label, name, logit, softmax
weight over the labels), the chosen one marked; `--json` prints the decision as JSON instead. With `--retrieve-k K`
(and `--index FILE.jsonl`, or a run's), a line gives the retrieved trajectories (id, similarity) and only the
candidates they bring are scored; with `--top-p P`, a last line gives the nucleus mixture (option and alpha).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tracec.cli.errors import EXIT_OK, UsageError
from tracec.cli.evaluate import (
    USER_ERRORS,
    add_model_arguments,
    add_target_arguments,
    load_model,
    model_choice,
    routing_from_args,
    target_from_args,
)
from tracec.cli.paths import input_file

from tracec.arguments import integer

__all__ = ["USER_ERRORS", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--task", help="the task's first message (or @FILE)")
    parser.add_argument("--seed", type=integer(0), default=0, help="with --target: the task's seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print the decision as JSON")
    group = parser.add_argument_group("a target's task instead of --task")
    add_target_arguments(group, required=False)


def run(args: argparse.Namespace) -> int:
    from tracec.trace_rl.targeting.adapters import BaseModelUser
    from tracec.trace_rl.targeting.routing import Router

    if (args.task is None) == (args.target is None):
        raise UsageError("give the task: --task TEXT (or @FILE), or --target ... --seed N")
    if args.options is None and args.run is None:
        raise UsageError("routing needs its options: --run DIR (a pipeline's run folder) or --options FILE")
    args.max_turns = 1
    text = _task_text(args.task) if args.task is not None else None  # the files, before the model loads
    target = target_from_args(args) if args.target is not None else None
    named = {"capability": len(args.env), "tau2": len(target.tau2.domains)} if target is not None else {}
    if named.get(args.target, 1) != 1:  # a TextWorld family is one domain
        raise UsageError("--target: name exactly one domain (one --env, or one --domain)")
    routing, index, _ = routing_from_args(args)
    choice = model_choice(args)
    user = BaseModelUser()  # the target's environment is built (its files read) before the model loads
    domain = _domain(target, args.seed, user) if target is not None else None
    model = load_model(choice)
    user.bind(model)
    options = choice.options
    assert options is not None  # --options or --run, checked above
    router = Router(model, options, routing, index)
    task = domain.first_message(args.seed) if domain is not None else text
    assert task is not None  # --task or --target, checked above
    decision = router.route(task, top_p=args.top_p)
    if args.json:
        print(json.dumps(decision.record(), indent=2))
        return EXIT_OK
    print(f"route: {decision.choice} (label {decision.label}, {decision.prompt_tokens} prompt tokens)")
    if decision.retrieved:
        print("retrieved: " + ", ".join(f"{r.id} {r.similarity:.4f}" for r in decision.retrieved)
              + (f" ({decision.note})" if decision.note else ""))
    for option in options:
        if option.name not in decision.logits:  # not a candidate: the retrieval left it out
            continue
        mark = "*" if option.name == decision.choice else " "
        print(f"{mark} {option.label:>4}  {option.name:<32} logit {decision.logits[option.name]:9.4f}  "
              f"weight {decision.weights[option.name]:.4f}")
    if decision.mixture is not None:
        print("mixture: " + ", ".join(f"{name} {alpha:.4f}" for name, alpha in decision.mixture.items()))
    return EXIT_OK


def _task_text(task: str) -> str:
    return input_file(Path(task[1:])).read_text(encoding="utf-8") if task.startswith("@") else task


def _domain(target: Any, seed: int, user: Any) -> Any:
    from tracec.trace_rl.targeting.pipeline.targets import target_domains  # the environments: torch, textworld

    (domain,) = target_domains(target, first_seed=seed, tasks=1, user=user)
    return domain
