"""The learning side of tracec, in rooms that import only downward (docs/architecture.md has the map):

- `policy/`: the model a run trains: the model catalog and SmolLM2's conversion, the tiny model, LoRA, log-probs
  over packed rows, and the command-level policy of admissible mode;
- `llm/`: chat backends (local transformers, an OpenAI-compatible HTTP server, vLLM) and what checks their replies;
- `envs/`: every environment behind the one protocol (capability environments, TextWorld, tau2-bench, ToolSandbox),
  the agent loop, tool calls, users and consent;
- `rollouts/`: multi-turn episodes at the token level, with their samplers (KV cache, vLLM) and turn layout;
- `grpo/`: the trainer: its config, credits (GRPO, TRCA, GiGPO, shaped GRPO, the oracle), loss, learner, checkpoints,
  data parallelism;
- `targeting/`: the TRACE method (capability-targeted training): analysis, synthesis, adapters and routing,
  evaluation, the pipeline;
- `experiments/`: the demo and the learning experiments on TextWorld task families.
"""
