"""Reward math: TRCA step rewards and returns (`trca`), group-relative advantages and exact context groups over
one task-group partition, and the fixed kernels they run (in C, or Numba where the extension was not built)."""
