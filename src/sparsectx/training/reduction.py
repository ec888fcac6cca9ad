"""Masked reductions of per-position losses to the scalar a micro-batch backpropagates.

Every reduction divides by a count taken over the WHOLE optimizer step (every micro-batch of the gradient
accumulation, and every rank under DDP), so summing the micro-batch losses reproduces the full-batch loss
exactly and accumulation 1×8 equals 8×1 (style convention 17; training-methods spec §1.7):

- ``seq_mean_token_mean`` (SCOPD Eq. 4 and Eq. 9, LT-OPD seed App. B): each sequence's token mean, then the
  mean over the step's sequences that have at least one valid token.
- ``global_token_mean`` (TRL GKD ``num_items_in_batch``, DAPO): Σ over all valid tokens / their count.
- ``constant_length`` (Dr.GRPO): Σ over all valid tokens / (sequences × ``max_new_tokens``).

Each is registered in ``REDUCTIONS`` under its ``method.reduction`` name and takes, as keyword-only arguments,
the step-wide counts it divides by, among ``STEP_COUNTS``; ``reduce_loss`` passes it exactly those.

Under DDP, gradients are averaged over ranks, so pass the counts summed over ranks and multiply the returned
loss by the world size (TRL divides its global count by ``num_processes`` for the same reason).

A micro-batch whose mask is empty returns an exact zero that is still attached to ``per_token``'s graph, so
``backward`` works (zero gradients) and every DDP rank reaches the same parameters.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable

import torch

from sparsectx.registry import Registry

REDUCTIONS: Registry[Callable[..., torch.Tensor]] = Registry("reduction")
"""``method.reduction`` name -> ``f(per_token, mask, *, <the counts it takes>)``."""
STEP_COUNTS = ("num_sequences", "num_tokens", "max_length")
"""What the loop offers every reduction: the step's sequences and tokens with a valid position (over every
micro-batch and rank) and ``max_new_tokens``."""


def _check(per_token: torch.Tensor, mask: torch.Tensor, count: int, count_name: str) -> None:
    if per_token.shape != mask.shape or per_token.dim() != 2 or mask.dtype != torch.bool:
        raise ValueError(
            f"per_token {tuple(per_token.shape)} and mask {mask.dtype} {tuple(mask.shape)} must both be "
            "(B, T), mask bool"
        )
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"{count_name}={count!r} must be an int >= 0 counted over the whole optimizer step")


def count_tokens(masks: Iterable[torch.Tensor]) -> int:
    """Returns the number of valid positions over all micro-batch masks of one optimizer step.

    Args:
        masks: the (B_j, T_j) bool loss masks of every micro-batch in the step.
    """
    return int(sum(int(m.sum()) for m in masks))


def count_sequences(masks: Iterable[torch.Tensor]) -> int:
    """Returns the number of sequences with at least one valid position over all micro-batch masks of a step.

    Sequences without a valid token (e.g. zero-length completions) are skipped, not counted (spec §1.7).

    Args:
        masks: the (B_j, T_j) bool loss masks of every micro-batch in the step.
    """
    return int(sum(int(m.any(dim=-1).sum()) for m in masks))


@REDUCTIONS.register("seq_mean_token_mean")
def seq_mean_token_mean(per_token: torch.Tensor, mask: torch.Tensor, *, num_sequences: int) -> torch.Tensor:
    """Returns Σ_i [Σ_t m_it ℓ_it / Σ_t m_it] / num_sequences: this micro-batch's share of the step loss.

    SCOPD Eq. 4 / Eq. 9 (1/T_i and 1/|K_i| inside, mean over sequences outside) and LT-OPD's reduction.

    Args:
        per_token: (B, T) float per-position loss ℓ_it; values at masked-out positions are ignored (even NaN).
        mask: (B, T) bool, True at positions that count (for SCOPD+ the selected positions).
        num_sequences: sequences with >= 1 valid position in the whole optimizer step
            (``count_sequences`` over every micro-batch, summed over ranks under DDP).
    """
    _check(per_token, mask, num_sequences, "num_sequences")
    masked = torch.where(mask, per_token, torch.zeros((), dtype=per_token.dtype, device=per_token.device))
    lengths = mask.sum(dim=-1).clamp_min(1).to(per_token.dtype)  # empty sequences add 0 / 1 = 0
    return (masked.sum(dim=-1) / lengths).sum() / max(num_sequences, 1)


@REDUCTIONS.register("global_token_mean")
def global_token_mean(per_token: torch.Tensor, mask: torch.Tensor, *, num_tokens: int) -> torch.Tensor:
    """Returns Σ_it m_it ℓ_it / num_tokens: this micro-batch's share of the step's global token mean.

    Args:
        per_token: (B, T) float per-position loss ℓ_it; values at masked-out positions are ignored (even NaN).
        mask: (B, T) bool, True at positions that count.
        num_tokens: valid positions in the whole optimizer step (``count_tokens`` over every micro-batch,
            summed over ranks under DDP).
    """
    _check(per_token, mask, num_tokens, "num_tokens")
    masked = torch.where(mask, per_token, torch.zeros((), dtype=per_token.dtype, device=per_token.device))
    return masked.sum() / max(num_tokens, 1)


@REDUCTIONS.register("constant_length")
def constant_length(
    per_token: torch.Tensor, mask: torch.Tensor, *, num_sequences: int, max_length: int
) -> torch.Tensor:
    """Returns Σ_it m_it ℓ_it / (num_sequences · max_length): Dr.GRPO's length-unbiased constant normaliser.

    TRL's ``loss_type="dr_grpo"`` (Liu et al. 2025): the sum over the step's valid positions divided by the
    step's sequence count times ``max_new_tokens`` (spec §1.7, "constant").

    Args:
        per_token: (B, T) float per-position loss ℓ_it; values at masked-out positions are ignored (even NaN).
        mask: (B, T) bool, True at positions that count.
        num_sequences: sequences with >= 1 valid position in the whole optimizer step.
        max_length: the longest response a rollout may have (``max_new_tokens``), >= 1.
    """
    _check(per_token, mask, num_sequences, "num_sequences")
    masked = torch.where(mask, per_token, torch.zeros((), dtype=per_token.dtype, device=per_token.device))
    return masked.sum() / (max(num_sequences, 1) * max_length)


def counts_taken(fn: Callable[..., torch.Tensor]) -> list[str]:
    """Returns the keyword-only argument names of reduction ``fn``: the step counts it divides by."""
    parameters = inspect.signature(fn).parameters.values()
    return [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]


def reduce_loss(
    name: str, per_token: torch.Tensor, mask: torch.Tensor, *, num_sequences: int, num_tokens: int, max_length: int
) -> torch.Tensor:
    """Returns reduction ``name`` of one micro-batch's per-position loss, given the step counts its signature takes.

    Args:
        name: a ``REDUCTIONS`` key (``method.reduction``).
        per_token: (B, T) float per-position loss.
        mask: (B, T) bool, True at positions that count.
        num_sequences: sequences with >= 1 valid position in the whole optimizer step.
        num_tokens: valid positions in the whole optimizer step.
        max_length: the longest response a rollout may have (``max_new_tokens``).
    """
    fn = REDUCTIONS.get(name)
    offered = {"num_sequences": num_sequences, "num_tokens": num_tokens, "max_length": max_length}
    return fn(per_token, mask, **{key: offered[key] for key in counts_taken(fn)})
