"""One log-prob variant's forward and backward in a fresh process: its peak memory and its times, as JSON.

`python -m bench.logprobs_peak VARIANT --tokens T --vocab V --width D` builds the packed action tokens' hidden
states h (T, D) fp32 with a gradient, a frozen LM head W (V, D) fp32 (LoRA's case: no gradient for W), targets and
a random upstream gradient per token, then runs `(logp(h, W, targets) * upstream).sum().backward()`.
`bench/test_logprobs_bench.py` starts one process per variant and case, so no variant's freed memory hides another's.

Peak memory, on CPU: the bytes of the inputs plus the growth of the process's resident set during the first
forward and backward, read from the kernel's high-water mark (`VmHWM`, reset to the current resident set through
`/proc/self/clear_refs` just before; each code path has run once before on tiny inputs, so loading libraries does
not count). That is the memory the tensors really occupy, allocator overhead included; glibc returns large
blocks to the system on free, so a tensor freed early does not linger in it. On CUDA: `max_memory_allocated`.
Variants (TRL 1.16):
- `naive`: full logits, log_softmax, gather.
- `trl_selective`: TRL's `selective_log_softmax` utility over the full logits, shaped as completions of 512 tokens.
  TRL's GRPO trainer does not call it (it scores through the fused LM head below). On CPU it is a torch loop over
  the completions (a Triton kernel on CUDA).
- `trl_chunked`: TRL's `ChunkedLogProbFunction`, the chunked LM head its GRPO trainer patches in
  (`add_fused_lm_head`), called as the trainer calls it: outputs `("log_probs", "entropy")`, TRL's vocabulary
  chunk of 32768, temperature 1, and no gradient through the entropy (the trainer's default `entropy_coef=0` uses
  it for metrics and the high-entropy mask only), on the action tokens alone (as the trainer does where Triton runs;
  elsewhere it scores every position, prompts too). On CPU this is TRL's torch fallback (`_forward_tile`,
  `_backward_tile`); its Triton kernels run on CUDA and XPU only.
- `liger`: Liger's fused linear cross-entropy (Triton only, so CUDA only).
- `ours`: `token_logprobs` (log-probs only); `ours_entropy`: the same with `with_entropy=True` (no gradient through
  the entropy either), the like-for-like side of `trl_chunked`.
The JSON also says the process's torch threads (`threads`: torch's default unless `--threads` sets them).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

LogProbs = Callable[[Tensor, Tensor, Tensor], Tensor]
TRL_VOCABULARY_CHUNK = 32768  # trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE in TRL 1.16
TRL_TRAINER_OUTPUTS = ("log_probs", "entropy")  # what trl.trainer.grpo_trainer asks of add_fused_lm_head
COMPLETION_TOKENS = 512  # tokens per completion row for trl_selective


def naive(hidden: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
    return torch.log_softmax(hidden @ weight.T, dim=-1).gather(1, targets[:, None]).squeeze(1)


def trl_selective(hidden: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
    """As TRL's GRPO trainer calls it: logits (completions, length, V), here completions of 512 tokens (its CPU
    path loops over the first axis; a (T, V) input would loop over every token)."""
    from trl.trainer.utils import selective_log_softmax

    rows = max(1, len(targets) // COMPLETION_TOKENS)
    logits = (hidden @ weight.T).view(rows, -1, weight.shape[0])
    return selective_log_softmax(logits, targets.view(rows, -1)).view(-1)


def trl_chunked(hidden: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
    """As `add_fused_lm_head` calls it for TRL's GRPO policy: with the entropy, which is left without a gradient."""
    from trl.kernels import ChunkedLogProbFunction

    # (hidden, weight, bias, targets, temperature, vocabulary chunk, soft-capping, logit scale, extra outputs)
    logprobs, entropy, *_ = ChunkedLogProbFunction.apply(hidden, weight, None, targets, 1.0, TRL_VOCABULARY_CHUNK,
                                                         None, 1.0, TRL_TRAINER_OUTPUTS)
    assert entropy is not None
    return logprobs


def liger(hidden: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
    from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss

    return -LigerFusedLinearCrossEntropyLoss(reduction="none")(weight, hidden, targets)


def ours(hidden: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
    from tracec.trace_rl.policy.logprobs import token_logprobs

    result = token_logprobs(hidden, weight, targets)
    assert isinstance(result, Tensor)
    return result


def ours_entropy(hidden: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
    from tracec.trace_rl.policy.logprobs import token_logprobs

    result = token_logprobs(hidden, weight, targets, with_entropy=True)
    assert isinstance(result, tuple)
    return result[0]


VARIANTS: dict[str, LogProbs] = {"naive": naive, "trl_selective": trl_selective, "trl_chunked": trl_chunked,
                                 "liger": liger, "ours": ours, "ours_entropy": ours_entropy}


def inputs(tokens: int, vocab: int, width: int, device: str, seed: int) -> tuple[Tensor, ...]:
    """h, W, targets, upstream; built in place, so building them leaves no peak above what they hold."""
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, width, generator=generator).to(device).requires_grad_(True)
    weight = torch.randn(vocab, width, generator=generator).mul_(2.0 / width ** 0.5).to(device)  # logits std 2
    targets = torch.randint(0, vocab, (tokens,), generator=generator).to(device)
    upstream = torch.randn(tokens, generator=generator).to(device)
    return hidden, weight, targets, upstream


def step(variant: LogProbs, hidden: Tensor, weight: Tensor, targets: Tensor, upstream: Tensor) -> Tensor:
    hidden.grad = None
    logprobs = variant(hidden, weight, targets)
    (logprobs * upstream).sum().backward()
    return logprobs.detach()


def _status_bytes(key: str) -> int:
    found = re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    assert found, key
    return int(found.group(1)) * 1024


def measure(variant: LogProbs, tokens: int, vocab: int, width: int, repeats: int, device: str,
            seed: int) -> dict[str, object]:
    step(variant, *inputs(8, 64, width, device, seed))  # load every code path on tiny inputs first
    hidden, weight, targets, upstream = tensors = inputs(tokens, vocab, width, device, seed)
    input_bytes = sum(t.numel() * t.element_size() for t in tensors)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        resident = _status_bytes("VmRSS")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        logprobs = step(variant, hidden, weight, targets, upstream)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        if len(times) == 1:  # the peak of the first step, before any repeat could reuse freed memory
            peak = (torch.cuda.max_memory_allocated() if device == "cuda"
                    else input_bytes + _status_bytes("VmHWM") - resident)
    assert hidden.grad is not None
    return {"peak_bytes": peak, "input_bytes": input_bytes, "times": times, "threads": torch.get_num_threads(),
            "logprob_sum": float(logprobs.double().sum()), "grad_norm": float(hidden.grad.double().norm())}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", choices=sorted(VARIANTS))
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--width", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        result = measure(VARIANTS[args.variant], args.tokens, args.vocab, args.width, args.repeats, args.device,
                         args.seed)
    except (RuntimeError, ImportError) as error:  # a variant that cannot run here (Liger without a GPU)
        result = {"error": f"{type(error).__name__}: {error}".splitlines()[0]}
    print(json.dumps({"variant": args.variant, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
