"""What every step of the pipeline reads (`Context`): the config, where to report, the analyst LLM, the base model.

The steps get it from `run.run_pipeline`; it lives apart from the step list so that a step module can name it
without importing the modules of every other step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tracec.trace_rl.llm.backends import open_backend
from tracec.trace_rl.llm.chat import SamplingBackend
from tracec.trace_rl.llm.options import BackendSettings
from tracec.trace_rl.targeting.peft_adapters import load_adapter_model
from tracec.trace_rl.targeting.pipeline.config import PipelineConfig
from tracec.trace_rl.targeting.pipeline.steps import PipelineFailed


@dataclass
class Context:
    """What every step reads: the config, where to report, the analyst LLM (opened on first use), the base model."""

    config: PipelineConfig
    report: Callable[[str], None]  # one line per step
    detail: Callable[[str], None]  # the steps' own progress lines
    llm: SamplingBackend | None = None
    _opened: list[SamplingBackend] = field(default_factory=list)

    def has_analyst(self) -> bool:
        return self.llm is not None or self.config.llm.backend != "none"

    def analyst(self) -> SamplingBackend:
        if self.llm is not None:
            return self.llm
        if not self._opened:
            section = self.config.llm
            if section.backend == "none":
                raise PipelineFailed("this step needs an analyst LLM: set [llm] backend")
            settings = BackendSettings(backend=section.backend, model=section.model or None,
                                       base_url=section.base_url or None, timeout=section.timeout,
                                       retries=section.retries, device=section.device, seed=self.config.run.seed)
            self._opened.append(open_backend(settings))
        return self._opened[0]

    def load_model(self, adapters: dict[str, Path], *, max_new_tokens: int, engine: str = "transformers") -> Any:
        model = self.config.model
        if model.threads:
            torch.set_num_threads(model.threads)
        return load_adapter_model(model.name, adapters, engine=engine, device=model.device, dtype=model.dtype,
                                  max_new_tokens=max_new_tokens, vllm_gpu_memory=self.config.evaluate.vllm_gpu_memory)
