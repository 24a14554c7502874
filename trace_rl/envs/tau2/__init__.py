"""tau2-bench airline and retail domains (placeholder docstring, rewritten below)."""
