"""Rollouts at the token level: the engine that plays groups of episodes (`engine`) as its `[rollout]` section says
(`section`, torch-free so that a config reads without torch), the turn layout (`turns`), and the samplers that decode
turns (`kv_sampler` on a transformers model, `vllm_sampler` on a GPU, `script_sampler` playing given texts) behind one
protocol (`sampler`)."""
