"""FastV (Chen et al., ECCV 2024): keep the image tokens the last prompt token attends to most at layer K-1.

Spec 2.4. Layers 0..K-1 see every token; before layer K each image keeps its k tokens with the highest
attention from the last prompt token at layer K-1 (softmax over the keys up to that token, mean over
heads; the row is recomputed from the layer's q/k, ``sparsectx.models.in_llm``). The authors' code
(pkunlp-icler/FastV, LLaVA) ranks the image span's attention the same way with ``topk``; ours keeps exactly
k = clamp(round(b N), 1, N) per image instead of round(N (1 - R)) over one image span.
"""

from __future__ import annotations

import torch

from sparsectx.layer_selection import ImageSignals
from sparsectx.pruning.base import IN_LLM, PrunerSpec


def select_fastv(signals: ImageSignals, k: int) -> torch.Tensor:
    """Returns the (k,) ascending indices of the image tokens with the largest last-token attention.

    Ties go to the lower index (a stable sort on the negated score).

    Args:
        signals: the image's layer K-1 signals; only ``attention`` (N,) is read.
        k: tokens to keep, 1 <= k <= N.
    """
    order = torch.sort(-signals.attention.float(), stable=True).indices
    return torch.sort(order[:k]).values


SPEC = PrunerSpec(name="fastv", stage=IN_LLM, select=select_fastv)
