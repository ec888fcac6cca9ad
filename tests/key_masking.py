"""The key-masking oracle shared by the removal tests: keep every token, mask the dropped ones as keys.

Removing visual tokens (with their unpruned positions) must equal keeping them and masking them as
attention keys (design invariant, spec 1.7): in every layer for a pre-LLM pruner, from layer K on for an
in-LLM one, in the full-attention layers only for a hybrid decoder. These two helpers build that oracle's
masks from a full context's (left-padded) 2D mask and the selections.
"""

from __future__ import annotations

import torch


def kept_keys(adapter, samples, selections, valid: torch.Tensor) -> torch.Tensor:
    """Returns ``valid`` (B, L) bool with every visual token the selections drop set to False."""
    keys = valid.clone()
    for b, (sample, sel) in enumerate(zip(samples, selections, strict=True)):
        start = keys.shape[1] - int(keys[b].sum())
        slots = torch.nonzero(sample.prompt_ids == adapter.image_token_id).flatten() + start
        offset = 0
        for image, s in zip(sample.images, sel, strict=True):
            dropped = torch.ones(image.num_tokens, dtype=torch.bool)
            dropped[s.indices] = False
            keys[b, slots[offset : offset + image.num_tokens][dropped]] = False
            offset += image.num_tokens
    return keys


def causal_key_bias(keys: torch.Tensor) -> torch.Tensor:
    """Returns the (B, 1, L, L) fp32 additive mask: causal, only ``keys`` (B, L) attended, every query its own.

    A query always attends itself, so padding rows stay finite (their outputs are never read).
    """
    width = keys.shape[1]
    allowed = torch.tril(torch.ones(width, width, dtype=torch.bool))[None] & keys[:, None, :]
    allowed |= torch.eye(width, dtype=torch.bool)[None]
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)[:, None]
