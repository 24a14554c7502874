"""Chat models: the protocols every conversation speaks (`chat.py`), a conversation as tokens (`conversation.py`),
the backends behind `SamplingBackend`, and what checks their replies.

- `local.py`: a transformers causal LM as a chat backend; `http.py`: any OpenAI-compatible chat-completions
  endpoint (`vllm serve`, llama.cpp's server, a hosted API); `vllm_backend.py`: vLLM in-process on a GPU (imported
  in one place, with an install hint);
- `options.py`: which backend a user's settings choose (light: the command line reads it for `--help`);
  `backends.py`: opening it (a local model imports torch);
- `calls.py`: the JSONL log of every call a command makes (prompt, reply, latency, verdict);
- `replies.py`: JSON found in prose or code fences, validated against a JSON Schema;
- `repair.py`: the bounded ask-check-repair loop every LLM step goes through.
"""
