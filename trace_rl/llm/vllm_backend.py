"""vLLM in-process as a `SamplingBackend`: the fast way to run analysis and calibration on one GPU machine.

vLLM is optional (`pip install 'tracec[gpu]'`) and imported by `import_vllm` only, when an engine is made. The
engine loads a local checkpoint folder (the caller resolves a model name from `tracec models` to its folder, so
nothing is downloaded), renders messages with the model's chat template (`LLM.chat`; tools carried on the system
message go as `tools=` or as the Hermes block, by `conversation.prepare`), and samples each call with
its own `SamplingParams`, so n samples, stop strings and a per-call seed behave as on the other backends.
`clean_model_folder`, `check_engine_model` and `engine_rank` are what every vLLM engine here (this backend, the
trainer's sampler, the adapter server) needs of a local checkpoint and its adapters: a folder vLLM reads, an
architecture it implements (checked before an engine starts, which takes a minute), a LoRA rank it serves. Left
out: tensor parallelism flags beyond what `vllm.LLM` takes as keywords (pass them in `engine`).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

from tracec.trace_rl.llm import conversation
from tracec.trace_rl.llm.calls import LLMError
from tracec.trace_rl.llm.chat import Sampling, cut_at_stop

INSTALL_HINT = ("vLLM is not installed; on a machine with a CUDA GPU: pip install 'tracec[gpu]'; on the CPU, vLLM's "
                "CPU engine lives in a venv of its own: make vllm-venv, then run .venv-vllm/bin/tracec")


ENGINE_RANKS = (8, 16, 32, 64, 128, 256, 512)  # the values vLLM accepts as max_lora_rank


def engine_rank(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds adapters of `rank` (a rank-4 adapter needs 8)."""
    for allowed in ENGINE_RANKS:
        if rank <= allowed:
            return allowed
    raise ValueError(f"a LoRA rank of {rank} is above the largest vLLM serves ({ENGINE_RANKS[-1]})")


def check_engine_model(folder: Path) -> None:
    """An `LLMError` naming `folder`'s config.json when vLLM has no implementation of the checkpoint's architecture
    (or the folder is no checkpoint), so a model vLLM cannot load is answered before its engine starts."""
    path = folder / "config.json"
    try:
        architectures = json.loads(path.read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, json.JSONDecodeError, AttributeError) as error:
        raise LLMError(f"{path}: not a checkpoint vLLM can load ({error}); name an installed model "
                       "(tracec models) or a transformers checkpoint folder") from None
    vllm = import_vllm()
    unknown = [name for name in architectures if name not in vllm.ModelRegistry.get_supported_archs()]
    if not architectures or unknown:
        said = ", ".join(unknown) if unknown else "no `architectures` entry"
        raise LLMError(f"{path}: vLLM {vllm.__version__} cannot load this model ({said}); decode it with the "
                       "transformers engine instead (rollout.backend = \"transformers\", evaluate.engine = "
                       "\"transformers\" or --engine transformers)")


def clean_model_folder(source: Path, target: Path) -> Path:
    """The checkpoint as vLLM should read it: links to its files, and a config.json without the GGUF
    `quantization_config` a converted checkpoint carries (the weights are plain floats)."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for path in source.iterdir():
        if path.name != "config.json":
            (target / path.name).symlink_to(path.resolve())
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    if (isinstance(config.get("quantization_config"), dict)
            and config["quantization_config"].get("quant_method") == "gguf"):
        del config["quantization_config"]
    (target / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return target


def vllm_installed() -> bool:
    """Whether `import_vllm` would find vLLM, asked without importing it (which takes seconds): what
    `rollout.backend = "auto"` asks."""
    return importlib.util.find_spec("vllm") is not None


def import_vllm(module: str = "vllm") -> Any:
    """The `vllm` module (or one of its modules, `vllm.inputs` say), or an `LLMError` with the install hint.
    The one place tracec imports vLLM, for every engine here: it is an optional extra (a CUDA build, or the CPU
    build in a venv of its own), and it takes seconds to import; so it is imported when an engine is made or used,
    never with a module."""
    try:
        import vllm
    except ImportError as error:
        raise LLMError(f"{INSTALL_HINT} ({error})") from None
    return vllm if module == "vllm" else importlib.import_module(module)


class VLLMBackend:
    def __init__(self, model: str | Path, *, default: Sampling | None = None,
                 seed: int = 0, **engine: Any) -> None:
        vllm = import_vllm()
        self._vllm, self.model = vllm, str(model)
        self.default = default or Sampling(max_tokens=512, temperature=0.0)
        self.engine = vllm.LLM(model=self.model, seed=seed, **engine)

    @property
    def name(self) -> str:
        return f"vllm:{Path(self.model).name}"

    def generate(self, messages: list[dict[str, str]]) -> str:
        return self.sample(messages, self.default)[0]

    def sample(self, messages: list[dict[str, str]], sampling: Sampling) -> list[str]:
        fields = {"n": sampling.n, "max_tokens": sampling.max_tokens or self.default.max_tokens,
                  "temperature": _first(sampling.temperature, self.default.temperature),
                  "top_p": _first(sampling.top_p, self.default.top_p), "seed": sampling.seed,
                  "stop": list(sampling.stop) or None}
        params = self._vllm.SamplingParams(**{k: v for k, v in fields.items() if v is not None})
        # carried tools: `tools=` when the model's template renders them, else the Hermes block (one rule)
        messages, tools = conversation.prepare(self.engine.get_tokenizer(), messages)
        outputs = self.engine.chat([messages], params, use_tqdm=False, **({} if tools is None else {"tools": tools}))
        return [cut_at_stop(choice.text, sampling.stop) for choice in outputs[0].outputs]


def _first(value: float | None, default: float | None) -> float | None:
    return value if value is not None else default
