"""Rollouts at the token level: the engine that plays groups of episodes (`engine`), the turn layout (`turns`), and
the samplers that decode turns (`kv_sampler` on a transformers model, `vllm_sampler` on a GPU)."""
