"""`python -m tracec.runtime.rewards.warm`: compile the Numba fixed kernels into Numba's on-disk cache ahead, for the
argument types the package passes them (6-7 s), where they are the ones in use (`fixed_kernels`: the C extension
was not built). With the extension there is nothing to do.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from tracec.compiler.context import Component, ContextKeys
from tracec.runtime.rewards.fixed_kernels import fixed_kernels
from tracec.runtime.rewards.trca import RewardConfig, discounted_returns, evaluate_rewards, trca_rewards


def warm() -> float:
    """Compile (or load) every fixed kernel in use for the types the package calls it with; returns the seconds."""
    started = time.perf_counter()
    offsets = np.array([0, 2, 3], dtype=np.int64)
    env_reward, groups = np.array([1.0, 0.0]), np.array([0, 0], dtype=np.int64)
    hashes = np.array([5, 5, 7], dtype=np.int64)
    word = Component(kind="word", values=np.array([1, 1, 2], dtype=np.int64), known=np.ones(3, dtype=np.uint8))
    a_set = Component(kind="set", values=np.array([3, 4], dtype=np.int64), known=np.ones(3, dtype=np.uint8),
                      offsets=np.array([0, 1, 1, 2], dtype=np.int64))
    # Exact step groups compile once per (scalar, set) tuple arity, rounded up to a power of two (context_groups).
    contexts = [hashes, None] + [ContextKeys(hash=hashes, components=(word,) * words + (a_set,) * sets)
                                 for words in (1, 2, 4) for sets in (0, 2)]
    config = RewardConfig()
    for n_ops in (3, 70):  # up to 64 operators in one pass, more in several
        O = (np.arange(3 * n_ops).reshape(3, n_ops) % 3 == 0).astype(np.uint8)
        weights = np.linspace(-1.0, 1.0, n_ops)
        for context in contexts:
            evaluate_rewards(O, offsets, env_reward, groups, context, weights, np.abs(weights), config, threads=1)
        r_trca = trca_rewards(O, offsets, weights, np.abs(weights), config.lam)[2]
    discounted_returns(r_trca, env_reward, offsets, config.gamma)
    return time.perf_counter() - started


if __name__ == "__main__":
    if fixed_kernels().native:
        print("tracec: the reward kernels were compiled with the package (tracec.runtime._fixed): nothing to do",
              file=sys.stderr)
    else:
        print(f"tracec: reward kernels compiled into Numba's cache in {warm():.1f} s", file=sys.stderr)
