"""Batched sampling of agent turns over a causal LM's forward, with each episode's KV cache kept across its turns.

`KVCacheSampler.sample(requests)` takes, for every live episode, the tokens added since its last turn (the whole
prompt at the first: after that only the observation's tokens are prefilled) and samples each episode's next turn
until an end-of-turn token or its token limit, all episodes in one batch: a prefill forward over the ragged new
chunks, then one forward per decoding step. It returns the exact ids drawn and their log-probabilities under the
sampling distribution (`log_softmax(logits / temperature)`, fp32), which the trainer keeps (token-in/token-out).

The batch is ragged and stays so: each row of the cache holds one episode's tokens with holes where the row had
nothing to add while others did (the left padding of a prefill chunk, the decoding steps after its turn ended).
Three things keep that exact: position ids count only a row's real tokens; a 4D additive mask lets a query see
only its row's real tokens up to itself (`transformers` uses a 4D mask as given); and a padding query sees only
itself, so no softmax row is empty (an empty row is NaN, and a NaN key times a zero weight would poison later
steps). When holes make up more than half the cache, the rows are compacted (keys keep the rotary phase of their
positions, so moving them is exact). The cache itself (`GrowingKVCache`) writes in place into buffers that double
when full: `DynamicCache` concatenates on every step, copying the whole cache each token.
Sampling draws each row from its episode's own generator (inverse CDF: one uniform a row, one batched search), so
an episode's tokens depend on its seed, not on which other episodes share the batch (up to float rounding in the
batched matmuls). The trainer decodes with the adapter merged into the base weights (`Policy.merged`).
Left out: top-p/top-k (the trainer needs the policy's own probabilities), speculative decoding, paged attention.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

_MIN_CAPACITY = 256


@dataclass(frozen=True, kw_only=True)
class TurnRequest:
    """One episode's next turn: its key (stable over its turns) and the tokens appended since its last turn."""

    key: int
    new_ids: Sequence[int]  # the prompt at the first turn; then the observation's tokens
    context: Sequence[int]  # every token of the episode so far, new_ids included (for samplers without a cache)
    generator: torch.Generator  # the episode's own random stream
    max_new_tokens: int


@dataclass(frozen=True, kw_only=True)
class SampledTurn:
    ids: list[int]  # as drawn; ends with an end-of-turn token when `closed`
    logprobs: list[float]  # of each drawn id under the sampling distribution
    closed: bool  # ended by an end-of-turn token (else by the token limit)


class GrowingKVCache:
    """Per layer key/value buffers (B, heads, capacity, dim) written in place; what attention reads is the filled part.

    It speaks the part of `transformers`' cache interface a decoder layer uses (`update`, `get_seq_length`)."""

    def __init__(self, num_layers: int) -> None:
        self.num_layers = num_layers
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.length = 0  # filled positions, holes included (the same for every layer after a forward)

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        start = self.length
        stop = start + key.shape[-2]
        if layer_idx == len(self.keys):
            capacity = max(_MIN_CAPACITY, 2 * stop)
            self.keys.append(key.new_zeros((*key.shape[:2], capacity, key.shape[-1])))
            self.values.append(value.new_zeros((*value.shape[:2], capacity, value.shape[-1])))
        if stop > self.keys[layer_idx].shape[-2]:
            self.keys[layer_idx] = _grown(self.keys[layer_idx], 2 * stop, start)
            self.values[layer_idx] = _grown(self.values[layer_idx], 2 * stop, start)
        self.keys[layer_idx][:, :, start:stop] = key
        self.values[layer_idx][:, :, start:stop] = value
        if layer_idx == self.num_layers - 1:  # the last layer of this forward: the new positions are filled
            self.length = stop
        return self.keys[layer_idx][:, :, :stop], self.values[layer_idx][:, :, :stop]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def select_rows(self, rows: torch.Tensor) -> None:
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]

    def gather_positions(self, index: torch.Tensor) -> None:
        """Keep, per row, the positions `index` (B, L') in that order: compaction."""
        for layer in range(len(self.keys)):
            for buffers in (self.keys, self.values):
                old = buffers[layer]
                gather = index[:, None, :, None].expand(old.shape[0], old.shape[1], -1, old.shape[3])
                new = old.new_zeros((*old.shape[:2], max(_MIN_CAPACITY, 2 * index.shape[1]), old.shape[3]))
                new[:, :, : index.shape[1]] = old.gather(2, gather)
                buffers[layer] = new
        self.length = int(index.shape[1])


def _grown(buffer: torch.Tensor, capacity: int, filled: int) -> torch.Tensor:
    new = buffer.new_zeros((*buffer.shape[:2], capacity, buffer.shape[-1]))
    new[:, :, :filled] = buffer[:, :, :filled]
    return new


class KVCacheSampler:
    """Samples the turns of a set of episodes in lockstep, one cache row per episode, for one batch of episodes."""

    def __init__(self, model: Any, *, temperature: float, end_of_turn_ids: frozenset[int], pad_id: int) -> None:
        if not temperature > 0:
            raise ValueError(f"KVCacheSampler: temperature={temperature!r} must be > 0")
        self.model, self.temperature = model, temperature
        self.end_of_turn_ids, self.pad_id = end_of_turn_ids, pad_id
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self._num_layers = int(base.config.num_hidden_layers)
        self._cache_argument = "cache" if "cache" in inspect.signature(type(base).forward).parameters \
            else "past_key_values"
        self.reset()

    def reset(self) -> None:
        """Forget every episode (a new batch begins)."""
        self._keys: list[int] = []
        self._cache = GrowingKVCache(self._num_layers)
        self._valid = torch.zeros((0, 0), dtype=torch.bool)  # (B, L): which cache positions hold a real token
        self._count = torch.zeros(0, dtype=torch.long)  # (B,) real tokens per row: the next position id
        self._unfed: list[list[int]] = []  # per row: drawn tokens not yet run through the model

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def sync(self, policy: Any) -> None:
        """Nothing to do: this sampler decodes with the training model's live weights."""

    def release(self, keys: Sequence[int]) -> None:
        """Drop finished episodes from the batch (their rows leave the cache)."""
        gone = set(keys)
        self._select([row for row, key in enumerate(self._keys) if key not in gone])

    def _select(self, rows: list[int]) -> None:
        if rows == list(range(len(self._keys))):
            return
        index = torch.tensor(rows, dtype=torch.long)
        self._keys = [self._keys[r] for r in rows]
        self._unfed = [self._unfed[r] for r in rows]
        self._count, self._valid = self._count[index], self._valid[index]
        self._cache.select_rows(index.to(self.device))

    @torch.no_grad()
    def sample(self, requests: Sequence[TurnRequest]) -> list[SampledTurn]:
        """The next turn of each requested episode; a key seen before continues its row, a new key starts one."""
        if not requests:
            return []
        self._arrange([request.key for request in requests])
        chunks = [self._unfed[row] + list(request.new_ids) for row, request in enumerate(requests)]
        self._unfed = [[] for _ in requests]
        logits = self._forward(chunks)
        drawn: list[list[int]] = [[] for _ in requests]
        logprobs: list[list[float]] = [[] for _ in requests]
        open_rows = set(range(len(requests)))
        while True:
            for row, (token, logprob) in self._draw(logits, sorted(open_rows), requests).items():
                drawn[row].append(token)
                logprobs[row].append(logprob)
                self._unfed[row] = [token]
                if token in self.end_of_turn_ids or len(drawn[row]) >= requests[row].max_new_tokens:
                    open_rows.discard(row)
            if not open_rows:
                break
            step = [self._unfed[row] for row in range(len(requests))]
            self._unfed = [[] for _ in requests]
            logits = self._forward(step)
        return [SampledTurn(ids=ids, logprobs=lps, closed=bool(ids) and ids[-1] in self.end_of_turn_ids)
                for ids, lps in zip(drawn, logprobs)]

    def _arrange(self, keys: list[int]) -> None:
        """Rows in the order of `keys`: live rows reordered (unrequested ones dropped), new keys appended empty."""
        known = {key: row for row, key in enumerate(self._keys)}
        fresh = [key for key in keys if key not in known]
        if fresh and self._keys and len(fresh) != len(keys):
            raise ValueError("KVCacheSampler: new episodes cannot join a batch that has begun; call reset() first")
        if not self._keys:
            self._keys, self._unfed = list(keys), [[] for _ in keys]
            self._count = torch.zeros(len(keys), dtype=torch.long)
            self._valid = torch.zeros((len(keys), 0), dtype=torch.bool)
            return
        self._select([known[key] for key in keys])

    def _forward(self, chunks: list[list[int]]) -> torch.Tensor:
        """Run each row's new tokens (left-padded to one width) through the model; the last position's logits (B, V)."""
        width = max(1, max(len(chunk) for chunk in chunks))
        rows = len(chunks)
        ids = torch.full((rows, width), self.pad_id, dtype=torch.long)
        real = torch.zeros((rows, width), dtype=torch.bool)
        for row, chunk in enumerate(chunks):
            if chunk:
                ids[row, width - len(chunk):] = torch.tensor(chunk, dtype=torch.long)
                real[row, width - len(chunk):] = True
        positions = self._count[:, None] + torch.cumsum(real.long(), dim=1) - 1
        positions = positions.clamp(min=0)  # padding: any position, nothing reads it
        mask = self._mask(real)
        self._valid = torch.cat([self._valid, real], dim=1)
        self._count = self._count + real.sum(dim=1)
        device = self.device
        output = self.model(input_ids=ids.to(device), position_ids=positions.to(device), attention_mask=mask.to(device),
                            use_cache=True, logits_to_keep=1, **{self._cache_argument: self._cache})
        self._compact_if_sparse()
        return output.logits[:, -1, :].float()

    def _mask(self, real: torch.Tensor) -> torch.Tensor:
        """(B, 1, Q, past + Q) additive: a real query sees its row's real tokens up to itself, a padding one itself."""
        rows, width = real.shape
        causal = torch.tril(torch.ones((width, width), dtype=torch.bool))
        new = causal[None] & real[:, None, :]
        new |= torch.eye(width, dtype=torch.bool)[None]
        past = self._valid[:, None, :].expand(rows, width, -1)
        allowed = torch.cat([past, new], dim=2)
        dtype = next(self.model.parameters()).dtype
        mask = torch.zeros(allowed.shape, dtype=dtype)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask[:, None]

    def _compact_if_sparse(self) -> None:
        rows, length = self._valid.shape
        if rows and length >= 2 * _MIN_CAPACITY and 2 * int(self._count.max()) <= length:
            self.compact()

    def compact(self) -> None:
        """Squeeze the holes out of the cache: each row keeps its real positions, left-padded to the longest row."""
        rows, length = self._valid.shape
        kept = int(self._count.max()) if rows else 0
        # Per row: its real positions in order, then (left of them) holes to fill the width `kept`.
        order = torch.argsort(self._valid.long(), dim=1, stable=True)[:, length - kept:]
        self._valid = torch.gather(self._valid, 1, order)
        self._cache.gather_positions(order.to(self.device))

    def _draw(self, logits: torch.Tensor, rows: list[int],
              requests: Sequence[TurnRequest]) -> dict[int, tuple[int, float]]:
        """One token per open row by inverse-CDF sampling: one uniform from each row's own generator, one batched
        cumulative sum and search (a `multinomial` per row costs ~1 ms each over a 49k vocabulary)."""
        logprobs = torch.log_softmax(logits[rows] / self.temperature, dim=-1).cpu()
        cdf = logprobs.double().exp().cumsum(dim=-1)  # fp64: the tail of a 49k-word cumulative sum stays exact
        # 1 - U lies in (0, 1]: the search then never lands on a zero-probability token
        uniforms = 1.0 - torch.stack([torch.rand((), dtype=torch.float64, generator=requests[row].generator)
                                      for row in rows])
        tokens = torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None]).squeeze(1).clamp_(max=cdf.shape[1] - 1)
        chosen = logprobs.gather(1, tokens[:, None]).squeeze(1)
        return {row: (int(token), float(logprob)) for row, token, logprob in zip(rows, tokens, chosen)}
