"""Unpruned prompt positions: 3-D M-RoPE (Qwen-VL, GLM-4.6V) or 1-D (LLaVA-OneVision), always as 3 rows.

Every family's positions travel as (3, L) rows through the context builder and the decode engine; a 1-D
family stores its one position in all three rows and its adapter passes row 0 to the language model.
"""

from __future__ import annotations

import torch


def rope_positions(
    ids: torch.Tensor,
    image_token_id: int,
    grids: list[tuple[int, int, int]],
    temporal_steps: list[int] | None = None,
) -> tuple[torch.Tensor, int]:
    """Returns the (3, L) M-RoPE positions of an unpruned prompt and the next free position.

    Qwen-VL layout (transformers 5.17's ``get_rope_index``): a text token takes (p, p, p) and advances p by
    1; a visual run of merged grid (t, h, w) starting at p gives its token (f, r, c) the triple
    (p + f * s, p + r, p + c), s its temporal step (1 for an image; a Qwen2.5-VL video's
    ``tokens_per_second * int(second_per_grid_t)``), and advances p by max(h, w). Runs are the prompt's
    visual slots (``image_token_id``) in order, one per grid; a Qwen3-VL video is one run per temporal patch.
    GLM-4.6V's ``get_rope_index`` gives the same triples for images (t = 1).

    The next free position is HF's decode start, max(position) + 1 (above p when a video's temporal
    positions outgrow its height and width); for images and text it is p.
    """
    steps = temporal_steps if temporal_steps is not None else [1] * len(grids)
    id_list = ids.tolist()
    out = torch.empty(3, len(id_list), dtype=torch.long)
    p, i, image = 0, 0, 0
    while i < len(id_list):
        if id_list[i] != image_token_id:
            out[:, i] = p
            p, i = p + 1, i + 1
            continue
        if image >= len(grids):
            raise ValueError(f"prompt has more image-token runs than images ({len(grids)})")
        t, h, w = grids[image]
        n = torch.arange(t * h * w)
        out[0, i : i + n.numel()] = p + (n // (h * w)) * steps[image]
        out[1, i : i + n.numel()] = p + (n // w) % h
        out[2, i : i + n.numel()] = p + n % w
        p, i, image = p + max(h, w), i + n.numel(), image + 1
    if image != len(grids):
        raise ValueError(f"prompt holds {image} image-token runs but {len(grids)} images were given")
    return out, max(p, int(out.max()) + 1) if id_list else p


def flat_positions(ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Returns the (3, L) 1-D positions 0..L-1 of an unpruned prompt (three equal rows) and L."""
    steps = torch.arange(ids.numel(), dtype=torch.long)
    return steps.expand(3, -1).clone(), ids.numel()
