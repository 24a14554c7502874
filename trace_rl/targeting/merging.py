"""Merging LoRA adapters into one: the linear (task-arithmetic) and TIES baselines TRACE is compared against.

    result = merge_linear([Path("train/a/adapter"), Path("train/b/adapter")], Path("baselines/merge_linear"))
    result = merge_ties(folders, out, density=0.2, scale=1.0)       # result.residual: what the SVD lost

An adapter folder is peft's (`adapter_config.json` + `adapter_model.safetensors`), read with safetensors alone. Adapter
c adapts module m by the delta s_c B_c A_c (s_c = lora_alpha / r_c, or / sqrt(r_c) with rsLoRA). The result is
a new folder of the same format (its config the first adapter's, with the new rank and lora_alpha = r, so its
scaling is 1), loadable by peft, vLLM and `PeftAdapters`, with `merge.json` beside saying how it was made.

- linear: W + sum_c w_c s_c B_c A_c exactly (w_c = 1/n by default: task arithmetic's mean), written as one LoRA of
  rank sum_c r_c: A's rows and B's columns concatenated, each B_c times w_c s_c.
- ties (Yadav et al. 2023, "TIES-Merging") on each module's dense deltas D_c = s_c B_c A_c: trim each D_c to its
  top `density` fraction by magnitude (k = ceil(density * entries), entries tied with the k-th kept), elect each
  entry's sign as the sign of the sum of the trimmed deltas (+ on a zero sum), average the trimmed entries that
  agree with it (the disjoint mean; an entry none agrees with is 0), times `scale` (lambda). Trimming a low-rank
  matrix makes it full-rank, so the merged delta is factored back by truncated SVD at `rank`, by default the sum of
  the input ranks: the rank the linear merge has, so both baselines carry adapters of one size and the untrimmed
  sum would fit exactly; `residual` reports ||D - D_rank||_F / ||D||_F pooled over every module (and the worst
  module's), so a lossy factoring is seen, never hidden. The square roots of the singular values go to both
  factors (B = U sqrt(S), A = sqrt(S) V^T), which keeps their scales alike.
Arithmetic is in float64; the tensors are written in the first adapter's dtype.
Left out: per-adapter weights in TIES (the paper has none; its lambda scales the merge), DARE, rank and alpha
patterns (an adapter with them is refused), DoRA adapters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from tracec.trace_rl.targeting.adapters import AdapterError, adapter_config

from tracec.atomic import write_atomic

WEIGHTS, CONFIG, RECORD = "adapter_model.safetensors", "adapter_config.json", "merge.json"
METHODS = ("linear", "ties")


class MergeError(AdapterError):
    """Adapters that cannot be merged (other modules or shapes, bad settings); the message names the folders."""


@dataclass(frozen=True, kw_only=True)
class Lora:
    """One adapter folder: its config, scaling, and per adapted module (by peft's key prefix) its A (r, in) and
    B (out, r), in float64."""

    folder: Path
    config: dict[str, object]
    scaling: float
    modules: dict[str, tuple[torch.Tensor, torch.Tensor]]
    dtype: torch.dtype

    @property
    def rank(self) -> int:
        return int(self.config["r"])  # type: ignore[call-overload]

    def delta(self, module: str) -> torch.Tensor:
        """s B A: the module's dense weight delta (out, in)."""
        a, b = self.modules[module]
        return self.scaling * (b @ a)


@dataclass(frozen=True, kw_only=True)
class MergeResult:
    folder: Path
    method: str
    rank: int
    sources: tuple[str, ...]
    weights: tuple[float, ...]  # linear: each adapter's weight; ties: ()
    residual: float  # ||D - D_rank|| / ||D|| pooled over every module: 0 for linear (exact)
    worst_residual: float  # the largest module's own

    def record(self) -> dict[str, object]:
        return {"method": self.method, "rank": self.rank, "sources": list(self.sources),
                "weights": list(self.weights), "residual": self.residual, "worst_residual": self.worst_residual}


def read_lora(folder: Path) -> Lora:
    """An adapter folder's tensors grouped by module, checked to be a plain LoRA of one rank."""
    try:
        config = adapter_config(folder)
    except AdapterError as error:
        raise MergeError(str(error)) from None
    if config.get("use_dora") or config.get("rank_pattern") or config.get("alpha_pattern"):
        raise MergeError(f"{folder}: DoRA adapters and rank or alpha patterns are not merged here")
    rank, alpha = config.get("r"), config.get("lora_alpha")
    if not isinstance(rank, int) or rank < 1 or not isinstance(alpha, (int, float)):
        raise MergeError(f"{folder / CONFIG}: `r` (an integer >= 1) and `lora_alpha` (a number) are expected")
    try:
        tensors = load_file(str(folder / WEIGHTS))
    except (FileNotFoundError, SafetensorError) as error:
        raise MergeError(f"{folder / WEIGHTS}: cannot read the adapter's tensors ({error})") from None
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        for part in ("lora_A", "lora_B"):
            head, found, tail = key.partition(f".{part}.")
            if found and tail in ("weight", "default.weight"):
                pairs.setdefault(head, {})[part] = value
                break
        else:
            raise MergeError(f"{folder / WEIGHTS}: tensor {key!r} is not a LoRA factor (lora_A / lora_B)")
    modules = {}
    for module, pair in sorted(pairs.items()):
        a, b = pair.get("lora_A"), pair.get("lora_B")
        if a is None or b is None or a.ndim != 2 or b.ndim != 2 or a.shape[0] != rank or b.shape[1] != rank:
            raise MergeError(f"{folder / WEIGHTS}: module {module!r} has no rank-{rank} pair of factors")
        modules[module] = (a.to(torch.float64), b.to(torch.float64))
    scaling = alpha / (math.sqrt(rank) if config.get("use_rslora") else rank)
    dtype = next(iter(tensors.values())).dtype
    return Lora(folder=folder, config=config, scaling=scaling, modules=modules, dtype=dtype)


def read_all(folders: Sequence[Path]) -> list[Lora]:
    """The adapters, checked to adapt the same modules of the same shapes (an error names the two folders)."""
    if not folders:
        raise MergeError("no adapters to merge")
    adapters = [read_lora(Path(f)) for f in folders]
    first = adapters[0]
    for other in adapters[1:]:
        if set(other.modules) != set(first.modules):
            only = sorted(set(first.modules) ^ set(other.modules))
            raise MergeError(f"{first.folder} and {other.folder} adapt different modules (e.g. {only[0]!r}); only "
                             "adapters of the same target modules on the same base model merge")
        for module, (a, b) in first.modules.items():
            a2, b2 = other.modules[module]
            if (b.shape[0], a.shape[1]) != (b2.shape[0], a2.shape[1]):
                raise MergeError(f"{first.folder} and {other.folder} adapt {module!r} of different shapes "
                                 f"({b.shape[0]}x{a.shape[1]} and {b2.shape[0]}x{a2.shape[1]}): not one base model")
    return adapters


def merge_linear(folders: Sequence[Path], out: Path, *, weights: Sequence[float] | None = None) -> MergeResult:
    """sum_c w_c s_c B_c A_c as one LoRA of rank sum_c r_c, exactly; `weights` default to 1/n each."""
    adapters = read_all(folders)
    chosen = tuple(float(w) for w in weights) if weights is not None else (1.0 / len(adapters),) * len(adapters)
    if len(chosen) != len(adapters) or not all(math.isfinite(w) for w in chosen):
        raise MergeError(f"merge weights {list(chosen)}: give one finite number per adapter ({len(adapters)})")
    modules = {}
    for module in adapters[0].modules:
        a = torch.cat([lora.modules[module][0] for lora in adapters], dim=0)
        b = torch.cat([w * lora.scaling * lora.modules[module][1] for w, lora in zip(chosen, adapters)], dim=1)
        modules[module] = (a, b)
    rank = sum(lora.rank for lora in adapters)
    return _write(adapters, modules, out, method="linear", rank=rank, weights=chosen, residuals=[])


def ties_delta(deltas: Sequence[torch.Tensor], *, density: float, scale: float = 1.0) -> torch.Tensor:
    """TIES's three steps on one module's dense deltas (each (out, in)): trim, elect sign, disjoint mean."""
    stacked = torch.stack([trimmed(d, density) for d in deltas])  # (n, out, in)
    elected = torch.where(stacked.sum(dim=0) >= 0, 1.0, -1.0).to(stacked.dtype)
    agrees = torch.sign(stacked) == elected  # a trimmed (zero) entry agrees with no sign
    count = agrees.sum(dim=0)
    total = torch.where(agrees, stacked, torch.zeros_like(stacked)).sum(dim=0)
    return scale * total / count.clamp(min=1)


def trimmed(delta: torch.Tensor, density: float) -> torch.Tensor:
    """`delta` with all but its top `density` fraction of entries by magnitude set to 0 (ties at the cut kept)."""
    size = delta.numel()
    keep = min(size, math.ceil(density * size))
    cut = torch.topk(delta.abs().reshape(-1), keep).values[-1]
    return torch.where(delta.abs() >= cut, delta, torch.zeros_like(delta))


def merge_ties(folders: Sequence[Path], out: Path, *, density: float = 0.2, scale: float = 1.0,
               rank: int | None = None) -> MergeResult:
    """TIES-merging of the adapters' deltas, factored back to a LoRA of `rank` (default: the sum of theirs)."""
    check_ties(density=density, scale=scale, rank=rank)
    adapters = read_all(folders)
    rank = sum(lora.rank for lora in adapters) if rank is None else rank
    modules, residuals = {}, []
    for module in adapters[0].modules:
        merged = ties_delta([lora.delta(module) for lora in adapters], density=density, scale=scale)
        a, b, lost = factored(merged, rank)
        modules[module] = (a, b)
        residuals.append((lost, float(merged.square().sum())))
    return _write(adapters, modules, out, method="ties", rank=rank, weights=(), residuals=residuals)


def check_ties(*, density: float, scale: float, rank: int | None) -> None:
    """TIES's settings, checked before any adapter is read (a pipeline checks them when it starts)."""
    if not 0 < density <= 1:
        raise MergeError(f"TIES density = {density}: the fraction of each delta kept, a number in (0, 1]")
    if not math.isfinite(scale):
        raise MergeError(f"TIES scale = {scale}: a finite number (lambda; 1 keeps the merged delta as it is)")
    if rank is not None and rank < 1:
        raise MergeError(f"TIES rank = {rank}: an integer >= 1 (or leave it out for the sum of the adapters' ranks)")


def factored(delta: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """A (rank, in) and B (out, rank) with B A the best rank-`rank` approximation of `delta` (zero-padded where
    the matrix has fewer dimensions), and the squared Frobenius norm of what is left out."""
    u, s, vh = torch.linalg.svd(delta, full_matrices=False)
    kept = min(rank, s.numel())
    root = s[:kept].sqrt()
    a = torch.zeros(rank, delta.shape[1], dtype=delta.dtype)
    b = torch.zeros(delta.shape[0], rank, dtype=delta.dtype)
    a[:kept], b[:, :kept] = root[:, None] * vh[:kept], u[:, :kept] * root
    return a, b, float(s[kept:].square().sum())


def _write(adapters: Sequence[Lora], modules: dict[str, tuple[torch.Tensor, torch.Tensor]], out: Path, *,
           method: str, rank: int, weights: tuple[float, ...], residuals: list[tuple[float, float]]) -> MergeResult:
    first = adapters[0]
    tensors = {}
    for module, (a, b) in modules.items():
        tensors[f"{module}.lora_A.weight"] = a.to(first.dtype).contiguous()
        tensors[f"{module}.lora_B.weight"] = b.to(first.dtype).contiguous()
    config = {**first.config, "r": rank, "lora_alpha": rank, "use_rslora": False}  # scaling 1: folded into B
    lost, total = sum(r for r, _ in residuals), sum(t for _, t in residuals)
    result = MergeResult(folder=out, method=method, rank=rank, sources=tuple(str(a.folder) for a in adapters),
                         weights=weights, residual=math.sqrt(lost / total) if total else 0.0,
                         worst_residual=max((math.sqrt(r / t) for r, t in residuals if t), default=0.0))
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f".{WEIGHTS}.tmp"
    save_file(tensors, str(staging))
    staging.replace(out / WEIGHTS)
    write_atomic(out / CONFIG, [json.dumps(config, indent=2) + "\n"])
    write_atomic(out / RECORD, [json.dumps(result.record(), indent=2) + "\n"])
    return result
