"""vLLM in-process on a GPU as a `SamplingBackend`: the fast way to run analysis and calibration on one machine.

vLLM is optional (`pip install 'tracec[gpu]'`) and imported here only, when a backend is made. The engine loads
a local checkpoint folder (the caller resolves a model name from `tracec models` to its folder, so nothing is
downloaded), renders messages with the model's chat template (`LLM.chat`), and samples each call with
its own `SamplingParams`, so n samples, stop strings and a per-call seed behave as on the other backends.
Left out: tensor parallelism flags beyond what `vllm.LLM` takes as keywords (pass them in `engine`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracec.runtime.chat import Sampling, cut_at_stop
from tracec.trace_rl.llm.calls import LLMError

INSTALL_HINT = "vLLM is not installed; on a machine with a CUDA GPU: pip install 'tracec[gpu]' (or pip install vllm)"


def import_vllm() -> Any:
    """The `vllm` module, or an `LLMError` with the install hint."""
    try:
        import vllm
    except ImportError as error:
        raise LLMError(f"{INSTALL_HINT} ({error})") from None
    return vllm


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
        outputs = self.engine.chat([messages], params, use_tqdm=False)
        return [cut_at_stop(choice.text, sampling.stop) for choice in outputs[0].outputs]


def _first(value: float | None, default: float | None) -> float | None:
    return value if value is not None else default
