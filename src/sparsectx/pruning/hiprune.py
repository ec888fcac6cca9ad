"""HiPrune (Liu et al., 2025): anchors, their spatial buffers and registers from vision-encoder attention.

Spec 2.6. Per image of N post-merger tokens and budget k (HiPrune's N'): a = round(alpha * k / 5) anchors,
the tokens receiving the most attention at the object block (a middle vision block); their buffers, the
up/left/right/down neighbours of each anchor in the merged grid of its own frame; registers, the tokens
receiving the most attention at the last full-attention block, filling the rest of k.

Spec 2.6 reports two faults of the reference code (Danielement321/HiPrune, Qwen2_5_VL/qwen2_5_vl_HiPrune.py,
not re-read here), fixed: its +-1 neighbours of a token at a row end wrap into the next/previous row, and it
keeps anchors out of the registers by subtracting 1 from scores that are sums over queries (up to N), so an
anchor can be picked again and fewer than k distinct tokens survive. Here neighbours never leave their row
or frame, every chosen token is masked with -inf, and the result has exactly k distinct tokens. Each image
uses its own grid and its own attention segment (the reference takes the first image's width for all).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from sparsectx.pruning.base import PRE_LLM, PrunerSpec
from sparsectx.visual import ImageTokens, Selection, VisionSignals

# Buffer order around an anchor: up, left, right, down (rows and columns of the merged grid).
_NEIGHBOURS = ((-1, 0), (0, -1), (0, 1), (1, 0))


def select_hiprune(
    image: ImageTokens,
    question_embeds: torch.Tensor,
    k: int,
    generator: torch.Generator,
    *,
    alpha: float,
) -> Selection:
    """Returns HiPrune's k anchor, buffer and register tokens of ``image``, indices ascending.

    Args:
        image: the image's N post-merger tokens; uses ``object_attention`` (N,) (declared signal),
            ``attention_received`` (N,) and ``grid``.
        question_embeds: (T_q, D) question embeddings; unused (HiPrune is text-agnostic).
        k: tokens to keep, 1 <= k <= N.
        generator: unused (deterministic; ties go to the lowest token index).
        alpha: share of k given to anchors and their buffers, in [0, 1]: round(alpha * k / 5) anchors.

    Raises:
        ValueError: ``image`` carries no object-block attention, or an attention signal is non-finite.
    """
    if image.object_attention is None:
        raise ValueError(
            "hiprune reads ImageTokens.object_attention, which this image lacks: the encode path records it "
            "only when the adapter's vision_signals ask for it (adapter.vision_signals = "
            "sparsectx.pruning.declared_signals('hiprune', params, seed) before encoding)"
        )
    signals = {"object_attention": image.object_attention, "attention_received": image.attention_received}
    for name, scores in signals.items():
        if not bool(torch.isfinite(scores).all()):
            raise ValueError(f"image.{name} has non-finite entries; HiPrune cannot rank them")
    keep = hiprune_indices(image.object_attention, image.attention_received, image.grid, k, alpha)
    return Selection.gather(image, keep)


def anchor_count(k: int, alpha: float) -> int:
    """Returns a = min(k, round(alpha * k / 5)), Python's round (half to even) as ``tokens_to_keep``."""
    return min(k, round(alpha * k / 5))


def hiprune_indices(
    object_scores: torch.Tensor, last_scores: torch.Tensor, grid: tuple[int, int, int], k: int, alpha: float
) -> torch.Tensor:
    """Returns the (k,) int64 ascending indices of HiPrune's anchors, buffers and registers.

    Anchors: the a = ``anchor_count(k, alpha)`` largest ``object_scores``. Buffers: the in-grid 4-neighbours
    of the anchors that are not anchors themselves, at most k - a of them (the largest object scores when
    more qualify). Registers: the largest ``last_scores`` among the tokens not chosen yet, filling k. Every
    ranking is by descending score with ties to the lowest index.

    Args:
        object_scores: (N,) attention received at the object block.
        last_scores: (N,) attention received at the last full-attention block.
        grid: merged grid (t, h, w), t * h * w == N; token n is frame n // (h w), row (n // w) % h, column n % w.
        k: tokens to keep, 1 <= k <= N.
        alpha: anchor-and-buffer share, in [0, 1].
    """
    n = object_scores.shape[0]
    by_object = torch.sort(object_scores.float(), descending=True, stable=True).indices
    anchors = by_object[: anchor_count(k, alpha)]
    chosen = torch.zeros(n, dtype=torch.bool, device=object_scores.device)
    chosen[anchors] = True
    buffers = grid_neighbours(anchors, grid, chosen)
    if buffers.numel() > k - anchors.numel():
        ranked = torch.sort(object_scores.float()[buffers], descending=True, stable=True).indices
        buffers = buffers[ranked[: k - anchors.numel()]]
    chosen[buffers] = True
    rest = last_scores.float().masked_fill(chosen, float("-inf"))
    registers = torch.sort(rest, descending=True, stable=True).indices[: k - int(chosen.sum())]
    return torch.sort(torch.cat([anchors, buffers, registers])).values


def grid_neighbours(anchors: torch.Tensor, grid: tuple[int, int, int], excluded: torch.Tensor) -> torch.Tensor:
    """Returns the distinct (B,) int64 up/left/right/down neighbours of ``anchors`` not in ``excluded``, ascending.

    A neighbour stays in its anchor's frame and row range: column c - 1 exists only for c > 0, c + 1 only
    for c < w - 1, row r - 1 only for r > 0, r + 1 only for r < h - 1 (no wrap-around).

    Args:
        anchors: (a,) int64 token indices.
        grid: merged grid (t, h, w) of the image.
        excluded: (N,) bool, tokens never returned (the anchors).
    """
    _, h, w = grid
    frame, row, col = anchors // (h * w), (anchors // w) % h, anchors % w
    found = torch.zeros_like(excluded)
    for dr, dc in _NEIGHBOURS:
        r, c = row + dr, col + dc
        inside = (r >= 0) & (r < h) & (c >= 0) & (c < w)
        found[(frame * h * w + r * w + c)[inside]] = True
    return torch.nonzero(found & ~excluded).squeeze(1)


def check_hiprune_params(params: Mapping[str, object]) -> None:
    """Raises ValueError unless ``pruner.params.alpha`` is a number in [0, 1]."""
    alpha = params["alpha"]
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(
            f"pruner.params.alpha={alpha!r} is outside [0, 1]: it is the share of the kept tokens given to "
            "anchors and their buffers (round(alpha * k / 5) anchors); HiPrune's default is 0.1"
        )


def hiprune_signals(params: Mapping[str, object], seed: int) -> VisionSignals:
    """Returns the object block's attention on top of the last block's, which HiPrune reads."""
    return VisionSignals(object_attention=True)


SPEC = PrunerSpec(
    name="hiprune", stage=PRE_LLM, select=select_hiprune, param_check=check_hiprune_params, signals=hiprune_signals
)
