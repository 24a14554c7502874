"""One side of the GRPO-iteration benchmark (`test_grpo_bench.py`), run in a fresh process: ours, or TRL's trainer.

    python bench/grpo_step.py ours OUT.json
    python bench/grpo_step.py trl  OUT.json --generation-batch 32   # or 8: TRL's batch as its defaults give it
    python bench/grpo_step.py trl  OUT.json --generation-batch 32 --head-cost --set NAME=VALUE ...

The work, the same for every side: an iteration is PROMPTS of the 8 prompts below (system + user, ~35 tokens with
SmolLM2's template), GROUP = 8 completions of each (a GRPO group), up to 32 new tokens at temperature 1,
SmolLM2-135M-Instruct with LoRA r16 on q, k, v, o, lr 1e-5, no KL, optimizer steps of 8 completions (TRL:
per-device batch 8; ours: mini-batches), and the same reward (the share of the letters a to m in the completion).
One warm-up iteration, then ITERATIONS timed. The JSON holds, per timed iteration, its wall seconds, its CPU seconds
(the process's), its completion tokens and its seconds by phase (PHASES): generation, scoring, old log-probs,
forward, backward, optimizer step, and `other` (the iteration's seconds the phases leave).

How each side measures its phases:
- ours: the trainer's own metrics (`time_rollout`, `time_score`, `time_old_logprobs`, and the learner's
  `time_forward`, `time_backward`, `time_optimizer`; `trace_rl/grpo/learner.py` says what each covers);
- TRL: the time inside `GenerationMixin.generate`, inside `_calculate_rewards`, inside
  `_get_per_token_logps_and_entropies` when called without gradients (the old log-probs, which TRL computes only
  when a generation batch spans several optimizer steps), inside `compute_loss` (the forward, with its loss),
  inside `accelerator.backward`, and inside `_clip_grad_norm` plus from `on_pre_optimizer_step` to
  `on_optimizer_step` (the optimizer); an iteration is its STEPS optimizer steps, each from `on_step_begin` to
  `on_step_end` (the logging between steps is left out).
Ours also measures floors for the timed iteration's own sequences, in the same process and thread: the prefill of
its 32 prompts and the decode steps for its longest completion at batch 32 with a KV cache (a plain `model(...)`
loop, the adapter merged as ours' sampler decodes), and one forward + backward of all 32 sequences, padded with
transformers' own loss (a user's way) and packed in ours' rows (`sequence_logprobs`); and, for its FLOP floor, the
fp32 matmul rate (`floors.matmul_rate`, right after the timed iteration) and the FLOPs of the iteration's work on
those sequences (`flop_counts`, counted by `bench/flops.py`).
With `--head-cost`, TRL's side also times its LM head over every position against the completion positions only,
on the timed iteration's mini-batches (`head_positions`). `--set NAME=VALUE` adds a `GRPOConfig` field (a JSON
value, else a string): how other settings were tried (`test_grpo_bench.TRIED`).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
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
PHASES = ("generation", "scoring", "old_logprobs", "forward", "backward", "optimizer")
FLOORS = ("floor_prefill", "floor_decode", "floor_fwd_bwd_padded", "floor_fwd_bwd_packed")


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


def _with_other(row: dict[str, float]) -> dict[str, float]:
    row["other"] = row["seconds"] - sum(row[phase] for phase in PHASES)
    return row


def ours() -> list[dict[str, float]]:
    from tracec.trace_rl.grpo.config import load_config
    from tracec.trace_rl.grpo.learner import Learner
    from tracec.trace_rl.grpo.train import train

    from bench.floors import matmul_rate

    config = load_config(None, [
        "env.kind=python", "env.python.factory=bench.grpo_step:question_env", "env.num_seeds=8", "env.max_turns=1",
        f"rollout.group_size={GROUP}", f"rollout.groups_per_batch={PROMPTS}", f"rollout.max_new_tokens={NEW_TOKENS}",
        "rollout.max_context_tokens=512", "rollout.loss_tokens=turn", "advantage.filter_constant_groups=false",
        "optim.lr=1e-5", f"optim.mini_batches={STEPS}", f"model.threads={THREADS}", f"iterations={1 + ITERATIONS}",
        "checkpoint_every=1000"])
    learned: list[Any] = []  # each update's sequences, for the floors: the learner's input, taken on the way in
    update = Learner.update

    def keeping(self: Learner, local: Any, table: Any, **kwargs: Any) -> Any:
        learned.append(list(local))
        return update(self, local, table, **kwargs)

    Learner.update = keeping  # type: ignore[method-assign]
    cpu = [time.process_time()]  # at the end of each iteration
    with tempfile.TemporaryDirectory() as out:
        result = train(config, out=out, on_iteration=lambda _: cpu.append(time.process_time()))
    Learner.update = update  # type: ignore[method-assign]
    rate = {"rate": matmul_rate()}  # GFLOP/s, right after the timed iteration, for its FLOP floor
    floor = floors(result.policy, learned[-1])
    work = flop_counts(result.policy, learned[-1])
    return [_with_other({"seconds": m["time_total"], "cpu": cpu[i + 1] - cpu[i], "tokens": m["sampled_tokens"],
                         "generation": m["time_rollout"], "scoring": m["time_score"],
                         "old_logprobs": m["time_old_logprobs"], "forward": m["time_forward"],
                         "backward": m["time_backward"], "optimizer": m["time_optimizer"], "learn": m["time_learn"],
                         **floor, **work, **rate})
            for i, m in enumerate(result.metrics) if i >= 1]


def flop_counts(policy: Any, sequences: list[Any]) -> dict[str, float]:
    """The FLOPs of the iteration's work on `sequences` (`bench/flops.py` counts them): sampling them, split into
    the prefill of the prompts and the decoding, and the learning phase's forward and backward (one epoch)."""
    import numpy as np
    from tracec.trace_rl.policy.model import TRAINED

    from bench.flops import ModelShape, causal_pairs, forward_flops, generation_flops, learning_flops

    lora = policy.model.peft_config[TRAINED]
    shape = ModelShape.of(policy.model.config, int(lora.r), sorted(lora.target_modules))
    lengths = [len(s.token_ids) for s in sequences]
    prompts = [int(np.argmax(s.loss_mask)) for s in sequences]  # the first loss token ends the prompt
    completions = [int(s.loss_mask.sum()) for s in sequences]
    prefill = sum(forward_flops(shape.merged(), tokens=p, pairs=causal_pairs(p), head_rows=1) for p in prompts)
    forward, backward = learning_flops(shape, lengths, completions)
    return {"flops_prefill": prefill, "flops_decode": generation_flops(shape, prompts, completions) - prefill,
            "flops_forward": forward, "flops_backward": backward, "learn_tokens": sum(lengths),
            # decoding's useful steps, and the floors' decode loop's (every row to the longest completion)
            "decode_tokens": sum(c - 1 for c in completions), "decode_rows": len(sequences) * (max(completions) - 1)}


def floors(policy: Any, sequences: list[Any]) -> dict[str, float]:
    """The floors (see the module) for `sequences`, one run each, in seconds."""
    import inspect

    import numpy as np
    import torch
    import transformers
    from tracec.trace_rl.grpo.learner import row_width
    from tracec.trace_rl.policy.logprobs import sequence_logprobs
    from tracec.trace_rl.policy.packing import pack_sequences

    model, pad = policy.model, int(policy.tokenizer.pad_token_id)
    ids = [s.token_ids.tolist() for s in sequences]
    masks = [s.loss_mask.tolist() for s in sequences]
    prompts = [tokens[:int(np.argmax(s.loss_mask))] for tokens, s in zip(ids, sequences, strict=True)]
    new_tokens = max(int(s.loss_mask.sum()) for s in sequences)
    out: dict[str, float] = {}
    width = max(len(p) for p in prompts)
    prompt_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    generator = torch.Generator().manual_seed(0)

    def draw(logits: torch.Tensor) -> torch.Tensor:
        return torch.multinomial(torch.softmax(logits[:, -1].float(), dim=-1), 1, generator=generator)

    base = model.get_base_model()
    cache = {"cache" if "cache" in inspect.signature(type(base).forward).parameters else "past_key_values":
             transformers.DynamicCache()}  # filled in place; transformers 5 renames the argument
    model.eval()
    with torch.no_grad(), policy.merged():
        start = time.perf_counter()
        token = draw(model(input_ids=prompt_ids, attention_mask=attention, use_cache=True, logits_to_keep=1,
                           position_ids=(attention.cumsum(-1) - 1).clamp(min=0), **cache).logits)
        out["floor_prefill"] = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(new_tokens - 1):
            attention = torch.cat([attention, torch.ones_like(token)], dim=1)
            token = draw(model(input_ids=token, attention_mask=attention, use_cache=True, **cache,
                               position_ids=attention.sum(-1, keepdim=True) - 1).logits)
        out["floor_decode"] = time.perf_counter() - start
    model.train()
    longest = max(len(tokens) for tokens in ids)
    padded = torch.tensor([tokens + [pad] * (longest - len(tokens)) for tokens in ids])
    present = torch.arange(longest) < torch.tensor([len(tokens) for tokens in ids])[:, None]
    scored = torch.tensor([mask + [False] * (longest - len(mask)) for mask in masks])
    labels = torch.where(scored, padded, -100)  # transformers' loss shifts them: position i - 1 predicts token i
    start = time.perf_counter()
    model(input_ids=padded, attention_mask=present.long(), labels=labels).loss.backward()
    out["floor_fwd_bwd_padded"] = time.perf_counter() - start
    model.zero_grad(set_to_none=True)
    batch = pack_sequences(ids, masks, max_tokens_per_row=row_width([len(tokens) for tokens in ids], 512), pad_id=pad)
    start = time.perf_counter()
    torch.cat(sequence_logprobs(model, batch)).sum().backward()  # type: ignore[arg-type]
    out["floor_fwd_bwd_packed"] = time.perf_counter() - start
    model.zero_grad(set_to_none=True)
    return out


class Phases:
    """Seconds spent inside chosen callables, by phase: `timed` wraps a callable to add its time to a phase."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)

    def timed(self, phase: str, function: Callable[..., Any], when: Callable[[], bool] = lambda: True) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            if not when():
                return function(*args, **kwargs)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - start

        return run


def trl(generation_batch: int, settings: dict[str, Any], head: bool) -> list[dict[str, float]]:
    """TRL's side; `settings`: more `GRPOConfig` fields (the trials of `--set`); `head`: also time its LM head
    both ways (`head_positions`)."""
    import torch
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
    tokens: list[int] = []

    # TRL's reward functions return list[float | None] (None: no reward for that completion).
    def share_reward(completions: list[Any], completion_ids: list[list[int]], **_: Any) -> list[float | None]:
        tokens.append(sum(len(ids) for ids in completion_ids))
        return [reward(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    phases = Phases()
    transformers.GenerationMixin.generate = phases.timed(  # type: ignore[method-assign]
        "generation", transformers.GenerationMixin.generate)
    steps: list[tuple[float, float, dict[str, float]]] = []  # each step's seconds, CPU seconds, phases so far

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            self.started, self.cpu = time.perf_counter(), time.process_time()

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            steps.append((time.perf_counter() - self.started, time.process_time() - self.cpu, dict(phases.seconds)))

        def on_pre_optimizer_step(self, *args: Any, **kwargs: Any) -> None:
            self.stepping = time.perf_counter()

        def on_optimizer_step(self, *args: Any, **kwargs: Any) -> None:
            phases.seconds["optimizer"] += time.perf_counter() - self.stepping

    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(output_dir=out, per_device_train_batch_size=8, num_generations=GROUP,
                          generation_batch_size=generation_batch, max_completion_length=NEW_TOKENS, temperature=1.0,
                          top_p=1.0, top_k=0, learning_rate=1e-5, beta=0.0, num_iterations=1,
                          max_steps=STEPS * (1 + ITERATIONS), logging_steps=1, report_to="none",
                          save_strategy="no", use_cpu=True, bf16=False, gradient_checkpointing=False, seed=0,
                          disable_dropout=True, shuffle_dataset=False, **settings)
        trainer = GRPOTrainer(model=model, reward_funcs=[share_reward], args=args, processing_class=tokenizer,
                              train_dataset=Dataset.from_list([{"prompt": p} for p in prompts * 8]),
                              peft_config=LoraConfig(r=16, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
                              callbacks=[Clock()])
        always, without_grad = (lambda: True), (lambda: not torch.is_grad_enabled())
        losses: list[tuple[Any, Any]] = []  # each optimizer step's (model, inputs), for the LM head's cost
        compute_loss = trainer.compute_loss

        def keeping(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            losses.append((model, inputs))
            return compute_loss(model, inputs, *args, **kwargs)

        trainer.compute_loss = keeping  # type: ignore[method-assign]
        for owner, name, phase, when in ((trainer, "_calculate_rewards", "scoring", always),
                                         (trainer, "_get_per_token_logps_and_entropies", "old_logprobs", without_grad),
                                         (trainer, "compute_loss", "forward", always),
                                         (trainer.accelerator, "backward", "backward", always),
                                         (trainer, "_clip_grad_norm", "optimizer", always)):
            # an instance attribute shadows the method the trainer calls as self.<name>
            setattr(owner, name, phases.timed(phase, getattr(owner, name), when))
        trainer.train()
        costs = head_positions(trainer, losses[-STEPS:]) if head else {}  # the timed iteration's steps
    rows = []
    calls = PROMPTS * GROUP // generation_batch  # reward calls an iteration
    for i in range(1, 1 + ITERATIONS):
        window = steps[i * STEPS:(i + 1) * STEPS]
        before, after = steps[i * STEPS - 1][2], window[-1][2]
        rows.append(_with_other({"seconds": sum(s[0] for s in window), "cpu": sum(s[1] for s in window),
                                 "tokens": sum(tokens[i * calls:(i + 1) * calls]),
                                 **{phase: after[phase] - before[phase] for phase in PHASES}, **costs}))
    return rows


def head_positions(trainer: Any, steps: list[tuple[Any, Any]]) -> dict[str, float]:
    """What TRL's LM head over every position costs on the CPU, on the timed iteration's own mini-batches.

    TRL's fused head (`trl.trainer.utils.add_fused_lm_head`) scores only the completion positions where Triton runs
    (CUDA, XPU) and every position of the padded batch elsewhere (prompt, padding and completion alike), masking the
    rest after. Timed here both ways on each mini-batch, one run each: the log-probs without gradients (the old
    log-probs' forward: `head_old_*`) and `compute_loss` + backward (`head_loss_*`); `_all` as TRL runs on the CPU,
    `_compact` with the compaction switched on (the kernel's tile arithmetic stays torch's). Also the positions each
    scores (`positions_all`, `positions_compact`)."""
    import torch
    import trl.trainer.utils as fused

    everywhere = fused._use_triton  # decides the compaction only: the kernel module keeps its own reference
    out = dict.fromkeys(("head_old_all", "head_old_compact", "head_loss_all", "head_loss_compact",
                         "positions_all", "positions_compact"), 0.0)
    ways = [("all", everywhere), ("compact", lambda device: True)]
    try:
        for index, (model, inputs) in enumerate(steps):
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
            mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
            out["positions_all"] += ids.shape[0] * (ids.shape[1] - 1)
            out["positions_compact"] += float(inputs["completion_mask"].sum())
            for way, compact in ways if index % 2 == 0 else ways[::-1]:  # each way first in half the batches
                fused._use_triton = compact
                start = time.perf_counter()
                with torch.no_grad():
                    trainer._get_per_token_logps_and_entropies(model, ids, mask, inputs["completion_ids"].shape[1])
                middle = time.perf_counter()
                trainer.compute_loss(model, inputs).backward()
                out[f"head_old_{way}"] += middle - start
                out[f"head_loss_{way}"] += time.perf_counter() - middle
                model.zero_grad(set_to_none=True)
    finally:
        fused._use_triton = everywhere
    return out


def _setting(text: str) -> tuple[str, Any]:
    """`--set name=value`: a `GRPOConfig` field, the value read as JSON (`true`, `4`, `{"a": 1}`) or else a string."""
    name, _, value = text.partition("=")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def main() -> None:
    import torch

    torch.set_num_threads(THREADS)
    side, out = sys.argv[1], Path(sys.argv[2])
    batch = int(sys.argv[sys.argv.index("--generation-batch") + 1]) if "--generation-batch" in sys.argv else 8
    settings = dict(_setting(sys.argv[i + 1]) for i, word in enumerate(sys.argv) if word == "--set")
    rows = ours() if side == "ours" else trl(batch, settings, "--head-cost" in sys.argv)
    out.write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
