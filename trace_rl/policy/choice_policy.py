"""The command-level policy of the admissible-command mode: log pi(c|s) of every candidate, re-scored with gradient.

In admissible mode the policy is not the LM's token distribution but a softmax over the turn's candidate commands
of their scores (`choice_score`: the mean, or the sum, of a command's token log-probs under the LM given the
episode so far). The sampler draws a command from it and records `log pi_old(c|s)`; the learner re-scores every
candidate of every turn under the current weights and puts the ratio, clip and advantage on `log pi(c|s)`, so that
raising the chosen command lowers its competitors (a token-level loss on the chosen command's tokens moves mass to
tokens no command uses, and its `<action>` tokens, shared by every candidate, carry a third of the loss).

Re-scoring is one forward per packed row over a tree (`choice_tree`): an episode's tokens as sampled (the trunk,
which holds each turn's chosen command), then each turn's other candidates as branches, every branch token at the
position it would take and seeing only the trunk before its turn and its own earlier tokens; an explicit 4D mask
keeps trees in one row apart. A candidate's first token is predicted by the trunk position before its turn, so
only its other tokens need branch positions (the last one, the end of the turn, is predicted but never fed).
Left out: candidates shared between turns (each turn scores its own), and KV reuse across trees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from tracec.trace_rl.policy.logprobs import decoder_and_head, token_logprobs
from tracec.trace_rl.policy.packing import first_fit_decreasing


@dataclass(frozen=True, kw_only=True)
class ChoiceTurn:
    """One admissible-mode turn of an episode: where it starts, what it chose from, what it chose, with what odds."""

    start: int  # index in the episode's token ids of the chosen command's first token
    choices: tuple[tuple[int, ...], ...]  # every candidate's ids (each a closed turn: ends with the end-of-turn id)
    chosen: int
    old_logprob: float  # log pi_old(chosen | context) under the sampler


# (the sum of a command's token log-probs, their count) -> its score; floats in the sampler, tensors in the learner
ChoiceScore = Callable[[float | Tensor, int | Tensor], float | Tensor]


def _per_token(total: float | Tensor, count: int | Tensor) -> float | Tensor:
    return total / count


def _summed(total: float | Tensor, count: int | Tensor) -> float | Tensor:
    return total


# A command's score from the sum of its tokens' log-probs and their count: per token (`mean`), which keeps an
# untrained policy near uniform instead of preferring the shortest commands, or the sum itself.
CHOICE_SCORES: dict[str, ChoiceScore] = {"mean": _per_token, "sum": _summed}
SCORES = tuple(CHOICE_SCORES)


def choice_score_rule(how: str) -> ChoiceScore:
    """The rule `rollout.choice_score` names, resolved once by whoever scores commands (sampler, learner)."""
    if how not in CHOICE_SCORES:
        raise ValueError(f"choice score {how!r}: use one of {SCORES}")
    return CHOICE_SCORES[how]


def tree_length(tokens: int, turns: Sequence[ChoiceTurn]) -> int:
    """Tokens an episode's tree takes: its own, and each turn's other candidates less their last token."""
    return tokens + sum(len(choice) - 1 for turn in turns for n, choice in enumerate(turn.choices) if n != turn.chosen)


@dataclass(frozen=True, kw_only=True)
class ChoiceTree:
    """Trees packed into rows, and where each candidate token's log-prob is read."""

    input_ids: Tensor  # (rows, W)
    position_ids: Tensor  # (rows, W)
    allowed: Tensor  # (rows, W, W) bool: query row i may attend key j
    hidden_index: Tensor  # (n,) flat row * W + column predicting each candidate token
    target_ids: Tensor  # (n,)
    candidate_of_token: Tensor  # (n,) the flat candidate index of each scored token
    token_counts: Tensor  # (candidates,) tokens of each candidate
    turn_of_candidate: Tensor  # (candidates,) the flat turn index of each candidate
    chosen_candidate: Tensor  # (turns,) the flat candidate index each turn chose


def choice_tree(sequences: Sequence[Sequence[int]], turns: Sequence[Sequence[ChoiceTurn]], *, row_tokens: int,
                pad_id: int) -> ChoiceTree:
    """The tree batch of episodes `sequences` (token ids as sampled) with their admissible-mode `turns`."""
    trees = [_tree(list(ids), list(ts)) for ids, ts in zip(sequences, turns, strict=True)]
    lengths = [len(tree[0]) for tree in trees]
    row_of, start_of, fills = first_fit_decreasing(lengths, max(max(lengths), row_tokens))
    width = max(fills)
    input_ids = torch.full((len(fills), width), pad_id, dtype=torch.long)
    position_ids = torch.zeros((len(fills), width), dtype=torch.long)
    allowed = torch.eye(width, dtype=torch.bool).repeat(len(fills), 1, 1)  # padding sees itself: no empty softmax row
    offsets = [row * width + start for row, start in zip(row_of, start_of, strict=True)]
    for (ids, positions, mask, _), row, start in zip(trees, row_of, start_of, strict=True):
        stop = start + len(ids)
        input_ids[row, start:stop] = torch.tensor(ids)
        position_ids[row, start:stop] = torch.tensor(positions)
        allowed[row, start:stop, start:stop] = mask
    hidden, targets, owner, counts, turn_of, chosen = [], [], [], [], [], []
    candidates = turns_done = 0
    for index, (_, _, _, tree_turns) in enumerate(trees):
        for turn_candidates, chosen_local in tree_turns:
            for tokens in turn_candidates:
                for predictor, target in tokens:
                    hidden.append(offsets[index] + predictor)
                    targets.append(target)
                    owner.append(candidates)
                counts.append(len(tokens))
                turn_of.append(turns_done)
                candidates += 1
            chosen.append(candidates - len(turn_candidates) + chosen_local)
            turns_done += 1
    return ChoiceTree(input_ids=input_ids, position_ids=position_ids, allowed=allowed,
                      hidden_index=torch.tensor(hidden, dtype=torch.long), target_ids=torch.tensor(targets),
                      candidate_of_token=torch.tensor(owner, dtype=torch.long),
                      token_counts=torch.tensor(counts, dtype=torch.float32),
                      turn_of_candidate=torch.tensor(turn_of, dtype=torch.long),
                      chosen_candidate=torch.tensor(chosen, dtype=torch.long))


_Tokens = list[tuple[int, int]]  # (predicting position in the tree, target id) of one candidate's tokens


def _tree(trunk: list[int], turns: list[ChoiceTurn]) -> tuple[list[int], list[int], Tensor,
                                                              list[tuple[list[_Tokens], int]]]:
    """One episode's tree: ids, positions, its (L, L) mask, and per turn each candidate's scored tokens."""
    ids, positions = list(trunk), list(range(len(trunk)))
    see_trunk: list[int] = []  # per branch token: how many trunk tokens it sees
    branch_of: list[int] = []  # per branch token: its branch's number
    scored_turns: list[tuple[list[_Tokens], int]] = []
    branch = 0
    for turn in turns:
        chosen = turn.choices[turn.chosen]
        if trunk[turn.start:turn.start + len(chosen)] != list(chosen):
            raise ValueError(f"choice_tree: the turn at token {turn.start} did not sample its recorded choice")
        if turn.start < 1:
            raise ValueError("choice_tree: a turn cannot start the episode (no position predicts its first token)")
        per_candidate: list[_Tokens] = []
        for number, choice in enumerate(turn.choices):
            if number == turn.chosen:
                per_candidate.append([(turn.start + d - 1, token) for d, token in enumerate(choice)])
                continue
            first_slot = len(ids)
            tokens = [(turn.start - 1, choice[0])]
            for depth, token in enumerate(choice[:-1]):
                ids.append(token)
                positions.append(turn.start + depth)
                see_trunk.append(turn.start)
                branch_of.append(branch)
                tokens.append((first_slot + depth, choice[depth + 1]))
            per_candidate.append(tokens)
            branch += 1
        scored_turns.append((per_candidate, turn.chosen))
    length, base = len(ids), len(trunk)
    mask = torch.zeros((length, length), dtype=torch.bool)
    mask[:base, :base] = torch.tril(torch.ones((base, base), dtype=torch.bool))
    if length > base:
        sees = torch.tensor(see_trunk)
        mask[base:, :base] = torch.arange(base)[None, :] < sees[:, None]
        owners = torch.tensor(branch_of)
        mask[base:, base:] = (owners[:, None] == owners[None, :]) & torch.tril(
            torch.ones((length - base, length - base), dtype=torch.bool))
    return ids, positions, mask, scored_turns


@dataclass(frozen=True, kw_only=True)
class ChoiceLogprobs:
    chosen: Tensor  # (turns,) log pi(chosen | s), with gradient
    entropy: Tensor  # (turns,) entropy of pi(. | s), with gradient


def choice_logprobs(model: torch.nn.Module, tree: ChoiceTree, *, temperature: float,
                    score: ChoiceScore) -> ChoiceLogprobs:
    """log pi(c|s) of each turn's chosen command and the entropy of pi(.|s), under `model` (a causal LM or peft)."""
    body, head = decoder_and_head(model)
    device = head.weight.device
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(tree.allowed.shape, dtype=dtype)
    mask.masked_fill_(~tree.allowed, torch.finfo(dtype).min)
    hidden = body(input_ids=tree.input_ids.to(device), position_ids=tree.position_ids.to(device),
                  attention_mask=mask[:, None].to(device), use_cache=False).last_hidden_state
    scored = hidden.reshape(-1, hidden.shape[-1])[tree.hidden_index.to(device)]
    logp = token_logprobs(scored, head.weight, tree.target_ids.to(device), temperature=temperature)
    assert isinstance(logp, Tensor)
    totals = torch.zeros(len(tree.token_counts), dtype=logp.dtype, device=device)
    totals = totals.index_add(0, tree.candidate_of_token.to(device), logp)
    scores = score(totals, tree.token_counts.to(device, logp.dtype))
    assert isinstance(scores, Tensor)
    turn = tree.turn_of_candidate.to(device)
    turns = len(tree.chosen_candidate)
    # a log-softmax per turn over its candidates (segments of `scores`)
    peak = torch.full((turns,), -torch.inf, dtype=scores.dtype, device=device).scatter_reduce(
        0, turn, scores.detach(), reduce="amax")
    shifted = scores - peak[turn]
    normalizer = torch.zeros(turns, dtype=scores.dtype, device=device).index_add(0, turn, shifted.exp()).log()
    log_pi = shifted - normalizer[turn]
    entropy = -torch.zeros(turns, dtype=scores.dtype, device=device).index_add(0, turn, log_pi.exp() * log_pi)
    return ChoiceLogprobs(chosen=log_pi[tree.chosen_candidate.to(device)], entropy=entropy)
