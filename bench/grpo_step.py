"""One side of the GRPO-iteration benchmark (`test_grpo_bench.py`), run in a fresh process: ours, or TRL's trainer.

    python bench/grpo_step.py ours OUT.json
    python bench/grpo_step.py trl  OUT.json --generation-batch 32   # or 8: TRL's batch as its defaults give it

The work, the same for every side: an iteration is PROMPTS of the 8 prompts below (system + user, ~35 tokens with
SmolLM2's template), GROUP = 8 completions of each (a GRPO group), up to 32 new tokens at temperature 1,
SmolLM2-135M-Instruct with LoRA r16 on q, k, v, o, lr 1e-5, no KL, optimizer steps of 8 completions (TRL:
per-device batch 8; ours: mini-batches), and the same reward (the share of the letters a to m in the completion).
One warm-up iteration, then ITERATIONS timed; the JSON holds each timed iteration's seconds, completion tokens and
time in generation.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `bench` importable when run as a script

SYSTEM = "You are a helpful assistant. Answer briefly."
QUESTIONS = [
    "Name three fruits that are red and say which one is the sweetest.",
    "What is the capital of France, and what river runs through it?",
    "Give me two tips for sleeping better at night, in one sentence each.",
    "Which is heavier, a kilogram of feathers or a kilogram of steel?",
    "Write a short greeting for a birthday card for a colleague.",
    "How many legs does a spider have, and how many does an ant have?",
    "Suggest a name for a small bakery that sells bread and cakes.",
    "What colour do you get when you mix blue and yellow paint?",
]
PROMPTS, GROUP, NEW_TOKENS, ITERATIONS = 4, 8, 32, 1
STEPS = PROMPTS * GROUP // 8  # optimizer steps of 8 completions an iteration
THREADS = 1  # torch threads of every side: the machine's two cores are shared, and two threads on a busy machine
# spend more time waiting for each other than computing


def reward(text: str) -> float:
    return sum(character in "abcdefghijklm" for character in text) / max(len(text), 1)


class QuestionEnv:
    """A single-turn environment over QUESTIONS: seed N asks question N mod 8; the reply ends the episode."""

    system_prompt = SYSTEM

    def reset(self, seed: int) -> Any:
        from tracec.trace_rl.envs.protocol import Observation

        self.question, self.reply = QUESTIONS[seed % len(QUESTIONS)], ""
        return Observation(text=self.question, role="user")

    def step(self, action: str) -> Any:
        from tracec.trace_rl.envs.protocol import Observation, StepResult

        self.reply = action
        return StepResult(observation=Observation(text="", role="user"), done=True, reward=reward(action),
                          state={}, action={"text": action})

    def trajectory(self, episode: str) -> dict[str, Any]:
        return {"episode": episode, "task": self.question, "instruction": self.question, "states": [{}, {}],
                "actions": [{"text": self.reply}], "env_reward": reward(self.reply), "success": False}


def question_env() -> QuestionEnv:
    return QuestionEnv()


def ours() -> list[dict[str, float]]:
    from tracec.trace_rl.grpo.config import load_config
    from tracec.trace_rl.grpo.train import train

    config = load_config(None, [
        "env.kind=python", "env.python.factory=bench.grpo_step:question_env", "env.num_seeds=8", "env.max_turns=1",
        f"rollout.group_size={GROUP}", f"rollout.groups_per_batch={PROMPTS}", f"rollout.max_new_tokens={NEW_TOKENS}",
        "rollout.max_context_tokens=512", "rollout.loss_tokens=turn", "advantage.filter_constant_groups=false",
        "optim.lr=1e-5", f"optim.mini_batches={STEPS}", f"model.threads={THREADS}", f"iterations={1 + ITERATIONS}", "checkpoint_every=1000"])
    with tempfile.TemporaryDirectory() as out:
        metrics = train(config, out=out).metrics
    return [{"seconds": m["time_total"], "tokens": m["sampled_tokens"], "generate": m["time_rollout"],
             "score": m["time_score"], "learn": m["time_learn"]} for m in metrics[1:]]


def trl(generation_batch: int) -> list[dict[str, float]]:
    import transformers
    from datasets import Dataset
    from peft import LoraConfig
    from tracec.trace_rl.policy.catalog import resolve_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    folder = resolve_model("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)  # a plain checkpoint (`tracec models install`)
    prompts = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}] for q in QUESTIONS]
    per_iteration = STEPS
    tokens: list[int] = []

    # TRL's reward functions return list[float | None] (None: no reward for that completion).
    def share_reward(completions: list[Any], completion_ids: list[list[int]], **_: Any) -> list[float | None]:
        tokens.append(sum(len(ids) for ids in completion_ids))
        return [reward(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    generate_time = [0.0]
    original = transformers.GenerationMixin.generate

    def timed_generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            generate_time[0] += time.perf_counter() - start

    transformers.GenerationMixin.generate = timed_generate  # type: ignore[method-assign]
    steps: list[float] = []

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            self.started = time.perf_counter()

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            steps.append(time.perf_counter() - self.started)

    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(output_dir=out, per_device_train_batch_size=8, num_generations=GROUP,
                          generation_batch_size=generation_batch, max_completion_length=NEW_TOKENS, temperature=1.0,
                          top_p=1.0, top_k=0, learning_rate=1e-5, beta=0.0, num_iterations=1,
                          max_steps=per_iteration * (1 + ITERATIONS), logging_steps=1, report_to="none",
                          save_strategy="no", use_cpu=True, bf16=False, gradient_checkpointing=False, seed=0,
                          disable_dropout=True, shuffle_dataset=False)
        trainer = GRPOTrainer(model=model, reward_funcs=[share_reward], args=args, processing_class=tokenizer,
                              train_dataset=Dataset.from_list([{"prompt": p} for p in prompts * 8]),
                              peft_config=LoraConfig(r=16, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
                              callbacks=[Clock()])
        marks: list[float] = []

        class Generation(TrainerCallback):  # type: ignore[misc]
            def on_step_end(self, *args: Any, **kwargs: Any) -> None:
                marks.append(generate_time[0])

        trainer.add_callback(Generation())
        trainer.train()
    out_rows = []
    calls_per_iteration = PROMPTS * GROUP // generation_batch
    for i in range(1, 1 + ITERATIONS):
        window = slice(i * per_iteration, (i + 1) * per_iteration)
        generate = marks[window.stop - 1] - marks[window.start - 1]
        out_rows.append({"seconds": sum(steps[window]), "generate": generate,
                         "tokens": sum(tokens[i * calls_per_iteration:(i + 1) * calls_per_iteration])})
    return out_rows


def main() -> None:
    import torch

    torch.set_num_threads(THREADS)
    side, out = sys.argv[1], Path(sys.argv[2])
    batch = int(sys.argv[sys.argv.index("--generation-batch") + 1]) if "--generation-batch" in sys.argv else 8
    rows = ours() if side == "ours" else trl(batch)
    out.write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
