"""Analytic FLOPs of a packed vision tower (Qwen-style: one sequence of patches, attention within each image or
window), the shared part of the families' ``FamilySpec.vision_flops`` formulas.

Counted as ``sparsectx.eval.costs`` counts the decoder (LT-OPD App. E: one multiply-accumulate = 2 FLOPs; norms,
rotary embeddings and activations not counted, as ``torch.utils.flop_counter.FlopCounterMode`` does not count
them): the patch embedding ``2 n C T_p p^2 D_v`` on n patches, per block the qkv and output projections
``8 n D_v^2``, the attention scores and weighted values ``4 D_v s^2`` per attention segment of s patches (a
frame, or a window of a frame in a windowed block), the MLP ``2 m n D_v I_v`` (m matmuls of width I_v: 3 for
SwiGLU, 2 for a two-layer MLP), and each merger ``2 M (u D_v)^2 + 2 M u D_v D_out`` on the M = n / u merged
tokens of u = merge^2 patches (plus one merger per DeepStack level). Each family module states which blocks are
windowed, which MLP and how many mergers its tower has (``tests/models/test_family_vision_flops.py`` holds the
formulas to their recorded values; the family tests to ``FlopCounterMode``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from transformers import PretrainedConfig

Grid = tuple[int, int, int]
"""An image's or video's patch grid (t, h, w), as the processor's ``image_grid_thw`` rows give it."""


def attention_segments(vision: PretrainedConfig, grid: Grid, windowed: bool) -> list[int]:
    """Returns the token counts of the attention segments of one image: frames, or windows of a frame (of
    ``vision.window_size`` pixels a side, in whole merge units; edge windows cut short)."""
    t, h, w = grid
    if not windowed:
        return [h * w] * t
    merge = vision.spatial_merge_size
    side = vision.window_size // merge // vision.patch_size  # window side in merged tokens
    rows, cols = h // merge, w // merge
    frame = [
        min(side, rows - r) * min(side, cols - c) * merge * merge
        for r in range(0, rows, side)
        for c in range(0, cols, side)
    ]
    return frame * t


def packed_tower_flops(
    vision: PretrainedConfig, grids: Sequence[Grid], full_blocks: Collection[int], mlp_matmuls: int, mergers: int
) -> float:
    """Returns the FLOPs of a Qwen-style tower and its mergers on images of patch grids ``grids`` (module doc).

    Args:
        vision: the ``vision_config`` (``hidden_size`` D_v, ``intermediate_size`` I_v, ``out_hidden_size``,
            ``depth``, patch, temporal patch and merge sizes, ``in_channels``; ``window_size`` for windows).
        grids: (t, h, w) patch grid of every image and video of the call.
        full_blocks: the blocks attending over a whole frame; the others attend within windows.
        mlp_matmuls: matmuls of a block's MLP (3: SwiGLU; 2: two-layer).
        mergers: merger MLPs run on the merged tokens (1, plus one per DeepStack level).
    """
    dv, iv, unit = vision.hidden_size, vision.intermediate_size, vision.spatial_merge_size**2
    n = float(sum(t * h * w for t, h, w in grids))
    kernel = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    total = 2 * n * kernel * dv
    mlp = 2 * mlp_matmuls * n * dv * iv
    for block in range(vision.depth):
        segments = [s for grid in grids for s in attention_segments(vision, grid, block not in full_blocks)]
        total += 8 * n * dv * dv + 4 * dv * sum(float(s) ** 2 for s in segments) + mlp
    merged = n / unit
    total += mergers * (2 * merged * (unit * dv) ** 2 + 2 * merged * unit * dv * vision.out_hidden_size)
    return total
