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
Given choices (the admissible-command action mode), a turn is not decoded: every choice of every row is scored in
one forward over the cache (a tree of choices side by side, each seeing the past and its own tokens), one is drawn
per row from the softmax of the choices' scores (the sum of their tokens' log-probs, or their mean), and its tokens
enter the episode as if decoded, with their log-probs under the sampling distribution.
Sampling draws each row from its episode's own generator (inverse CDF: one uniform a row, one batched search), so
an episode's tokens depend on its seed, not on which other episodes share the batch (up to float rounding in the
batched matmuls). The trainer decodes with the adapter merged into the base weights (`Policy.merged`).
`greedy` takes the most likely choice or token instead (evaluation). Left out: top-p/top-k (the trainer needs the
policy's own probabilities), speculative decoding, paged attention.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from tracec.trace_rl.policy.choice_policy import choice_score_rule
from tracec.trace_rl.rollouts.sampler import SampledTurn, TurnRequest, TurnSampler

_MIN_CAPACITY = 256


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

    def keep_tail(self, start: int, index: torch.Tensor) -> None:
        """Replace the positions from `start` on by, per row, those `index` (B, L') picks among them: the chosen
        command of a tree of choices stays, the others go."""
        for layer in range(len(self.keys)):
            for buffers in (self.keys, self.values):
                old = buffers[layer]
                gather = (start + index)[:, None, :, None].expand(old.shape[0], old.shape[1], -1, old.shape[3])
                old[:, :, start:start + index.shape[1]] = torch.gather(old, 2, gather)
        self.length = start + index.shape[1]

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


class KVCacheSampler(TurnSampler):
    """Samples the turns of a set of episodes in lockstep, one cache row per episode, for one batch of episodes."""

    decodes_with_training_weights = True  # the training model's live weights: nothing to sync
    recomputes_old_logprobs = False  # its log-probs are the training model's own

    def __init__(self, model: Any, *, temperature: float, end_of_turn_ids: frozenset[int], pad_id: int,
                 choice_score: str = "mean", greedy: bool = False) -> None:
        if not temperature > 0:
            raise ValueError(f"KVCacheSampler: temperature={temperature!r} must be > 0")
        self.model, self.temperature, self.choice_score = model, temperature, choice_score_rule(choice_score)
        self.greedy = greedy  # the most likely choice or token (evaluation); log-probs stay the sampling ones
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
        choosing = [bool(request.choices) for request in requests]
        if any(choosing) and not all(choosing):
            raise ValueError("KVCacheSampler: a batch either chooses among given choices or decodes, not both")
        self._arrange([request.key for request in requests])
        chunks = [self._unfed[row] + list(request.new_ids) for row, request in enumerate(requests)]
        self._unfed = [[] for _ in requests]
        logits = self._forward(chunks)
        if all(choosing):
            return self._choose(logits, requests)
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
        ids, real = self._left_padded(chunks)
        positions = self._count[:, None] + torch.cumsum(real.long(), dim=1) - 1
        causal = torch.tril(torch.ones((ids.shape[1], ids.shape[1]), dtype=torch.bool))
        logits = self._run(ids, positions, causal[None] & real[:, None, :], keep=1)
        self._valid = torch.cat([self._valid, real], dim=1)
        self._count = self._count + real.sum(dim=1)
        self._compact_if_sparse()
        return logits[:, -1, :]

    def _left_padded(self, chunks: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, W) ids and which of them are real, each row's chunk at the right end."""
        width = max(1, max(len(chunk) for chunk in chunks))
        ids = torch.full((len(chunks), width), self.pad_id, dtype=torch.long)
        real = torch.zeros((len(chunks), width), dtype=torch.bool)
        for row, chunk in enumerate(chunks):
            if chunk:
                ids[row, width - len(chunk):] = torch.tensor(list(chunk), dtype=torch.long)
                real[row, width - len(chunk):] = True
        return ids, real

    def _run(self, ids: torch.Tensor, positions: torch.Tensor, new: torch.Tensor, *, keep: int) -> torch.Tensor:
        """The model over a block of new tokens (B, W) that see the rows' real past and, within the block, what
        `new` (B, W, W) allows; the logits (fp32) of the last `keep` positions. The caller records the block."""
        device = self.device
        output = self.model(input_ids=ids.to(device), position_ids=positions.clamp(min=0).to(device),
                            attention_mask=self._mask(new).to(device), use_cache=True, logits_to_keep=keep,
                            **{self._cache_argument: self._cache})
        return output.logits.float()

    def _mask(self, new: torch.Tensor) -> torch.Tensor:
        """(B, 1, Q, past + Q) additive: a query sees its row's real past and what `new` allows in the block; a
        padding query sees only itself (no softmax row may be empty)."""
        rows, width, _ = new.shape
        allowed = torch.cat([self._valid[:, None, :].expand(rows, width, -1),
                             new | torch.eye(width, dtype=torch.bool)[None]], dim=2)
        dtype = next(self.model.parameters()).dtype
        mask = torch.zeros(allowed.shape, dtype=dtype)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask[:, None]

    def _choose(self, first: torch.Tensor, requests: Sequence[TurnRequest]) -> list[SampledTurn]:
        """Score every choice of every row in one forward and draw one per row (`first`: (B, V), the logits that
        predict a choice's first token). The choices of a row are laid side by side after its past, all but their
        last token fed, each at the positions it would take and seeing only the past and its own tokens (a tree
        of choices); the chosen one's positions then stay in the cache as if it had been decoded, the others'
        become holes, and its last token (the end of the turn) waits to be fed with the next observation."""
        fed = [[token for choice in r.choices for token in choice[:-1]] for r in requests]
        ids, real = self._left_padded(fed)
        width = ids.shape[1]
        owner = torch.full((len(requests), width), -1, dtype=torch.long)  # which choice a slot's token belongs to
        depth = torch.zeros((len(requests), width), dtype=torch.long)  # its index within that choice
        for row, request in enumerate(requests):
            slot = width - len(fed[row])
            for index, choice in enumerate(request.choices):
                span = len(choice) - 1
                owner[row, slot:slot + span] = index
                depth[row, slot:slot + span] = torch.arange(span)
                slot += span
        same = (owner[:, :, None] == owner[:, None, :]) & torch.tril(torch.ones((width, width), dtype=torch.bool))
        logits = self._run(ids, self._count[:, None] + depth, same & real[:, None, :], keep=width) \
            if any(fed) else None
        turns = []
        for row, request in enumerate(requests):
            tree = logits[row] if logits is not None else first[row, None]
            lps = self._choice_logprobs(first[row], tree, width - len(fed[row]), request.choices)
            scores = torch.tensor([self._score(values) for values in lps], dtype=torch.float64)
            index = int(torch.argmax(scores)) if self.greedy else self._pick(scores, request.generator)
            chosen = list(request.choices[index])
            self._unfed[row] = [chosen[-1]]
            turns.append(SampledTurn(ids=chosen, logprobs=lps[index], closed=chosen[-1] in self.end_of_turn_ids,
                                     choice=index, choice_logprob=float(torch.log_softmax(scores, 0)[index])))
        if logits is not None:
            self._keep_chosen(owner, [turn.choice for turn in turns])
        return turns

    def _keep_chosen(self, owner: torch.Tensor, chosen: list[int | None]) -> None:
        """Drop the tree's other choices from the cache at once: per row the chosen one's positions, moved to the
        right end of a block as wide as the longest of them (left of it, holes)."""
        kept = owner == torch.tensor(chosen)[:, None]  # (B, W)
        width = int(kept.sum(dim=1).max())
        # stable sort puts a row's dropped slots first and its kept ones, in order, last
        order = torch.argsort(kept.long(), dim=1, stable=True)[:, kept.shape[1] - width:]
        self._cache.keep_tail(self._valid.shape[1], order.to(self.device))
        self._valid = torch.cat([self._valid, torch.gather(kept, 1, order)], dim=1)
        self._count = self._count + kept.sum(dim=1)
        self._compact_if_sparse()

    def _choice_logprobs(self, first: torch.Tensor, tree: torch.Tensor, start: int,
                         choices: Sequence[Sequence[int]]) -> list[list[float]]:
        """Per choice, the sampling log-prob of each of its tokens: the first from `first` (V,), the others from
        the tree's logits (W, V) at the slot of the token before (the row's slots begin at `start`)."""
        head = torch.log_softmax(first / self.temperature, dim=-1)
        body = torch.log_softmax(tree / self.temperature, dim=-1)
        out, slot = [], start
        for choice in choices:
            values = [float(head[choice[0]])]
            values += [float(body[slot + j, choice[j + 1]]) for j in range(len(choice) - 1)]
            out.append(values)
            slot += len(choice) - 1
        return out

    def _score(self, logprobs: list[float]) -> float:
        """A choice's score (`choice_policy.CHOICE_SCORES`: one rule for the sampler and the learner)."""
        return float(self.choice_score(sum(logprobs), len(logprobs)))

    @staticmethod
    def _pick(scores: torch.Tensor, generator: torch.Generator) -> int:
        """A draw from softmax(scores) by inverse CDF with one uniform of the episode's stream."""
        probabilities = torch.softmax(scores, dim=0)
        uniform = 1.0 - float(torch.rand((), dtype=torch.float64, generator=generator))
        index = int(torch.searchsorted(probabilities.cumsum(0), torch.tensor([uniform]), side="left"))
        return min(index, len(scores) - 1)

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
        tokens = logprobs.argmax(dim=1) if self.greedy else \
            torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None]).squeeze(1).clamp_(max=cdf.shape[1] - 1)
        chosen = logprobs.gather(1, tokens[:, None]).squeeze(1)
        return {row: (int(token), float(logprob)) for row, token, logprob in zip(rows, tokens, chosen)}
