"""DivPrune (Alvar et al., CVPR 2025): keep the tokens that solve the Max-Min Diversity Problem greedily.

Spec 2.3. Distance d_ij = 1 - cos(x_i, x_j) between post-merger embeddings, in fp32. The first pick is
the token with the largest nearest-neighbour distance; every later pick maximises its minimum distance to
the picked set, kept as a running minimum with picked tokens masked (MMTok's fix to the reference code).
Text-agnostic and needs no attention.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sparsectx.pruning.base import PRE_LLM, PrunerSpec
from sparsectx.visual import ImageTokens, Selection

# Rows of the (rows, N) similarity block used for nearest-neighbour distances: 2048 x 16k fp32 = 128 MiB.
_ROW_CHUNK = 2048


def select_divprune(
    image: ImageTokens,
    question_embeds: torch.Tensor,
    k: int,
    generator: torch.Generator,
) -> Selection:
    """Returns the k tokens that greedy max-min diversity picks from ``image.embeds``, indices ascending.

    Args:
        image: the image's N post-merger tokens; ``embeds`` is (N, D).
        question_embeds: (T_q, D) question embeddings; unused (DivPrune is text-agnostic).
        k: tokens to keep, 1 <= k <= N.
        generator: unused (deterministic; ties go to the lowest token index).
    """
    return Selection.gather(image, max_min_order(image.embeds, k))


def max_min_order(features: torch.Tensor, k: int) -> torch.Tensor:
    """Returns the (k,) int64 token indices in the order greedy max-min diversity picks them.

    Implements DivPrune's greedy solver of the Max-Min Diversity Problem, max_S min_{i != j in S} d_ij
    (Alvar et al., CVPR 2025), with d_ij = 1 - cos(x_i, x_j): pick 1 maximises the nearest-neighbour
    distance, pick t maximises min_{s < t} d(i, pick_s). Ties go to the lowest index (first ``argmax``).

    Args:
        features: (N, D) token vectors, any float dtype; distances are computed in fp32.
        k: number of picks, 1 <= k <= N.
    """
    x = F.normalize(features.float(), dim=-1)
    picks = torch.empty(k, dtype=torch.long, device=x.device)
    picks[0] = torch.argmax(_nearest_neighbour_distance(x))
    min_dist = 1.0 - x @ x[picks[0]]
    min_dist[picks[0]] = float("-inf")
    for t in range(1, k):
        picks[t] = torch.argmax(min_dist)
        min_dist = torch.minimum(min_dist, 1.0 - x @ x[picks[t]])
        min_dist[picks[t]] = float("-inf")
    return picks


def _nearest_neighbour_distance(x: torch.Tensor) -> torch.Tensor:
    """Returns (N,) fp32 min_{j != i} (1 - x_i . x_j) for unit rows x (N, D); +inf when N == 1."""
    n = x.shape[0]
    best = torch.empty(n, dtype=x.dtype, device=x.device)
    for start in range(0, n, _ROW_CHUNK):
        stop = min(n, start + _ROW_CHUNK)
        sim = x[start:stop] @ x.T
        rows = torch.arange(stop - start, device=x.device)
        sim[rows, rows + start] = float("-inf")
        best[start:stop] = sim.max(dim=1).values
    return 1.0 - best


SPEC = PrunerSpec(name="divprune", stage=PRE_LLM, select=select_divprune)
