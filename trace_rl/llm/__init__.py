"""The LLM side of tracec's analysis and synthesis: backends behind `SamplingBackend`, and what checks their replies.

- `http.py`: any OpenAI-compatible chat-completions endpoint (`vllm serve`, llama.cpp's server, a hosted API);
- `vllm_backend.py`: vLLM in-process on a GPU (imported lazily, with an install hint);
- the local transformers model is `tracec.trace_rl.llm.local.TransformersBackend`;
- `calls.py`: the JSONL log of every call a command makes (prompt, reply, latency, verdict);
- `replies.py`: JSON found in prose or code fences, validated against a JSON Schema;
- `repair.py`: the bounded ask-check-repair loop every LLM step goes through;
- `options.py`: the command-line flags that choose and configure a backend.
"""
