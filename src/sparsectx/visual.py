"""Per-image (or per-video) encoded visual tokens, and what a pruner returns for them.

These two records are the contract between the model adapters (which produce ``ImageTokens`` once per
image), the pruning operators (which turn them into a ``Selection``) and the context builder (which
places the selected tokens at their original positions in the LLM input).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class ImageTokens:
    """One image, or one video, after the vision tower and merger, in raster order of its merged grid.

    A video is one ``ImageTokens`` whose grid has t temporal patches: a pruner's budget covers all of its
    tokens, and each kept token keeps its (temporal, row, column) position.

    Attributes:
        embeds: (N, D) post-merger tokens in the LLM's input-embedding space.
        grid: merged grid (t, h, w) with t * h * w == N; token n sits at row (n // w) % h, column n % w.
        attention_received: (N,) fp32 attention each token receives in the last full-attention vision
            block (mean over heads, sum over queries, mean over its merge unit).
        keys: (N, d_head) fp32 keys of that block, averaged over the merge unit and over heads.
        deepstack: per DeepStack level a (N, D) tensor (Qwen3-VL); empty for other families.
        object_attention: (N,) fp32 attention each token receives in the family's object block (a middle
            vision block, HiPrune's anchors), measured like ``attention_received``; None unless the pruner
            declared it (``VisionSignals.object_attention``).
        merger_sensitivity: (N,) fp32 zeroth-order sensitivity of the merger output to its input (ZOO-Prune);
            None unless the pruner declared it (``VisionSignals.merger_probe``).
        temporal_step: M-RoPE temporal position step between temporal patches: 1 for an image, a Qwen2.5-VL
            video's ``tokens_per_second * int(second_per_grid_t)`` (``models.positions.rope_positions``).
        split_frames: the prompt holds each temporal patch as its own run between timestamps (a Qwen3-VL or
            Qwen3.5 video), each positioned like a one-frame image.
    """

    embeds: torch.Tensor
    grid: tuple[int, int, int]
    attention_received: torch.Tensor
    keys: torch.Tensor
    deepstack: tuple[torch.Tensor, ...] = field(default_factory=tuple)
    object_attention: torch.Tensor | None = None
    merger_sensitivity: torch.Tensor | None = None
    temporal_step: int = 1
    split_frames: bool = False

    def position_runs(self) -> list[tuple[tuple[int, int, int], int]]:
        """Returns the prompt runs of this input as (grid, temporal step): one, or one per temporal patch."""
        t, h, w = self.grid
        if self.split_frames:
            return [((1, h, w), 1)] * t
        return [(self.grid, self.temporal_step)]

    @property
    def num_tokens(self) -> int:
        """Returns N, the number of post-merger tokens of this image."""
        return self.embeds.shape[0]


@dataclass(frozen=True)
class MergerProbe:
    """How the merger's zeroth-order sensitivity is estimated (ZOO-Prune, Kim et al., CVPR 2026).

    Attributes:
        probes: m, random unit directions averaged over.
        step: h, the central-difference step along each direction.
        seed: seeds the directions (one CPU draw, shared by every merged token of every image).
    """

    probes: int
    step: float
    seed: int


@dataclass(frozen=True)
class VisionSignals:
    """Which signals beyond the always-recorded last-block ones the encode path adds to ``ImageTokens``.

    A pruner declares what it needs (``sparsectx.pruning.declared_signals``); the adapter records exactly
    that in the one tower pass, so operators that need nothing extra pay nothing extra.

    Attributes:
        object_attention: record attention received at the family's object block too.
        merger_probe: estimate the merger's zeroth-order sensitivity this way; None = not at all.
    """

    object_attention: bool = False
    merger_probe: MergerProbe | None = None


@dataclass
class Selection:
    """The k tokens a pruner keeps for one image.

    Attributes:
        indices: (k,) int64 raster indices into the image's tokens, strictly ascending. Each kept token
            takes the original 3D position of the token at its index.
        embeds: (k, D) the token vectors fed to the LLM (usually ``image.embeds[indices]``; VisionZip's
            contextual tokens are merged vectors written into their target's slot).
        deepstack: per DeepStack level the (k, D) vectors, pruned/merged exactly like ``embeds``.
    """

    indices: torch.Tensor
    embeds: torch.Tensor
    deepstack: tuple[torch.Tensor, ...] = field(default_factory=tuple)

    @staticmethod
    def gather(image: ImageTokens, indices: torch.Tensor) -> Selection:
        """Returns the selection that keeps ``image``'s tokens at ``indices`` unchanged (sorted first)."""
        order = torch.sort(indices.to(torch.long)).values
        return Selection(
            indices=order,
            embeds=image.embeds[order],
            deepstack=tuple(level[order] for level in image.deepstack),
        )

    @staticmethod
    def keep_all(image: ImageTokens) -> Selection:
        """Returns the selection that keeps every token of ``image`` (budget 1.0)."""
        return Selection.gather(image, torch.arange(image.num_tokens, device=image.embeds.device))
