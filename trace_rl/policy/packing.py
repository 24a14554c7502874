"""Packing token sequences into rows for one forward pass: no padding between sequences, positions per sequence.

`pack_sequences(sequences, loss_masks, max_tokens_per_row=...)` lays the sequences (token ids, exactly as sampled)
end to end into as few rows as first-fit-decreasing finds, each row at most `max_tokens_per_row` tokens, and gives
every sequence position ids that restart at 0. A causal LM run on such a batch with `attention_mask=None` and no
cache keeps the sequences apart (transformers builds a block-diagonal mask from the restarts, see `logprobs.py`).
Rows are only as wide as the fullest row; a shorter row ends in padding whose position ids restart at 0 too, so the
padding is a sequence of its own that nothing attends to and no loss reads.

The batch also holds, for every token whose loss mask is true, the flat position of the hidden state that predicts
it (the previous position in the same sequence) and its id: the LM head then sees only those positions. Why pack at
all: GRPO groups have sequences of very different lengths, and padding each to the longest wastes a large share of
the forward and backward on tokens no loss reads.
Left out: splitting a sequence across rows (a sequence longer than a row is an error that names the fix), and
any notion of what a token is (chat templates and action masks are the trainer's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True, kw_only=True)
class PackedBatch:
    """Sequences packed into rows; the loss tokens' predicting positions in input order, sequence by sequence."""
    input_ids: Tensor  # (rows, T) int64
    position_ids: Tensor  # (rows, T) int64, 0, 1, ... per sequence and for a row's padding tail
    sequence_rows: tuple[int, ...]  # per input sequence: its row,
    sequence_starts: tuple[int, ...]  # its first column,
    sequence_lengths: tuple[int, ...]  # and its length
    hidden_index: Tensor  # (n_loss,) int64: row * T + column of the position whose logits predict each loss token
    target_ids: Tensor  # (n_loss,) int64: the loss tokens
    loss_counts: tuple[int, ...]  # loss tokens per input sequence (split sizes for hidden_index and target_ids)

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def row_length(self) -> int:
        return int(self.input_ids.shape[1])


def pack_sequences(sequences: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[bool]], *,
                   max_tokens_per_row: int, pad_id: int = 0) -> PackedBatch:
    """Pack token sequences (each with a loss mask of its length) into rows of at most `max_tokens_per_row`."""
    _check(sequences, loss_masks, max_tokens_per_row)
    rows, starts, fills = first_fit_decreasing([len(tokens) for tokens in sequences], max_tokens_per_row)
    width = max(fills)
    input_ids = torch.full((len(fills), width), pad_id, dtype=torch.long)
    position_ids = torch.empty((len(fills), width), dtype=torch.long)
    for row, fill in enumerate(fills):
        position_ids[row, fill:] = torch.arange(width - fill)  # the padding tail: a sequence of its own
    hidden_index, target_ids, loss_counts = [], [], []
    for tokens, mask, row, start in zip(sequences, loss_masks, rows, starts, strict=True):
        ids = torch.as_tensor(list(tokens), dtype=torch.long)
        input_ids[row, start:start + len(ids)] = ids
        position_ids[row, start:start + len(ids)] = torch.arange(len(ids))
        scored = torch.as_tensor(list(mask), dtype=torch.bool).nonzero().view(-1)  # token positions with a loss
        hidden_index.append(row * width + start + scored - 1)
        target_ids.append(ids[scored])
        loss_counts.append(len(scored))
    return PackedBatch(input_ids=input_ids, position_ids=position_ids, sequence_rows=tuple(rows),
                       sequence_starts=tuple(starts), sequence_lengths=tuple(len(tokens) for tokens in sequences),
                       hidden_index=torch.cat(hidden_index), target_ids=torch.cat(target_ids),
                       loss_counts=tuple(loss_counts))


def first_fit_decreasing(lengths: list[int], capacity: int) -> tuple[list[int], list[int], list[int]]:
    """(row of each item, its offset in the row, each row's fill): longest first, each into the first row it fits."""
    rows, starts = [0] * len(lengths), [0] * len(lengths)
    fills: list[int] = []
    for item in sorted(range(len(lengths)), key=lambda i: -lengths[i]):  # stable: ties keep input order
        row = next((r for r, fill in enumerate(fills) if fill + lengths[item] <= capacity), len(fills))
        if row == len(fills):
            fills.append(0)
        rows[item], starts[item] = row, fills[row]
        fills[row] += lengths[item]
    return rows, starts, fills


def _check(sequences: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[bool]], capacity: int) -> None:
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"pack_sequences: max_tokens_per_row={capacity!r} must be an integer >= 1")
    if not sequences:
        raise ValueError("pack_sequences: no sequences to pack")
    if len(sequences) != len(loss_masks):
        raise ValueError(f"pack_sequences: {len(sequences)} sequences but {len(loss_masks)} loss masks")
    for index, (tokens, mask) in enumerate(zip(sequences, loss_masks, strict=True)):
        if not tokens:
            raise ValueError(f"pack_sequences: sequence {index} is empty")
        if len(mask) != len(tokens):
            raise ValueError(f"pack_sequences: sequence {index} has {len(tokens)} tokens but a loss mask of "
                             f"{len(mask)}")
        if len(tokens) > capacity:
            raise ValueError(f"pack_sequences: sequence {index} has {len(tokens)} tokens, more than "
                             f"max_tokens_per_row={capacity}; raise max_tokens_per_row or truncate the sequence")
        if mask[0]:
            raise ValueError(f"pack_sequences: sequence {index} has a loss on its first token, which no earlier "
                             "position predicts; the first token of a sequence is always context")
        if min(tokens) < 0:
            raise ValueError(f"pack_sequences: sequence {index} has a negative token id {min(tokens)}")
