"""The policy: models loaded or built (`catalog`, `smollm2`, `tiny` and its vocabulary `tiny_vocab`), the LoRA model
(`model`), log-probs of chosen tokens over packed rows (`packing`, `logprobs`, `logprobs_triton`), and the
command-level policy of admissible mode (`choice_policy`)."""
