"""CDPruner (Zhang et al., NeurIPS 2025): conditional DPP over visual tokens, greedy MAP.

Spec 2.2. Kernel L = diag(q) S diag(q) with S_ij = cos(x_i, x_j) between post-merger embeddings and
quality q from the relevance of each token to the question: r_i = cos(x_i, mean-pooled question embedding),
min-max normalised over the image, optionally weighted q = exp(alpha * r) with alpha = theta / (2(1 - theta)).
The MAP set is approximated greedily with the incremental-Cholesky algorithm of Chen et al. (NeurIPS 2018,
"Fast greedy MAP inference for DPP", Alg. 1), matrix-free and in fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sparsectx.pruning.base import PRE_LLM, PrunerSpec
from sparsectx.visual import ImageTokens, Selection

# Relevance spans (max - min) at or below this are treated as constant: every token gets relevance 1.
_FLAT_SPAN = 1e-6
# Greedy stops once the best marginal gain is at fp32 rounding level. After t picks a gain is computed as
# q_i^2 - sum_{s<t} e_si^2, t subtractions of terms no larger than max L_ii, so its rounding error is at
# most about t * eps_fp32 * max L_ii (eps = 2^-23 ~ 1.2e-7: ~1e-6 relative after eight picks). Measured
# after the kernel's rank (<= D) is exhausted, the leftover gains reach 1.5 t eps max L_ii (300 random
# kernels, N <= 460, D <= 64, tokens up to cos 0.97 apart, bf16 inputs; 6e-5 relative at t = D = 1536
# with cos ~0.9) while real gains went down to 2.7 t eps max L_ii, so the stop is at 2 t eps max L_ii.
# Issue 16: the former fixed 1e-4 of max L_ii dropped near-duplicate picks that are stable in float64.
_NOISE_PER_PICK = 2.0 * torch.finfo(torch.float32).eps


def select_cdpruner(
    image: ImageTokens,
    question_embeds: torch.Tensor,
    k: int,
    generator: torch.Generator,
    *,
    theta: float | None,
) -> Selection:
    """Returns the k tokens of ``image`` that greedy conditional-DPP MAP picks, indices ascending.

    Args:
        image: the image's N post-merger tokens; uses ``embeds`` (N, D).
        question_embeds: (T_q, D) LLM input embeddings of the question tokens only.
        k: tokens to keep, 1 <= k <= N.
        generator: unused (deterministic; ties go to the lowest token index).
        theta: relevance/diversity trade-off in [0, 1); quality = exp(alpha * r) with
            alpha = theta / (2(1 - theta)). None uses the normalised relevance r itself as quality.

    Raises:
        ValueError: ``theta`` is neither None nor in [0, 1).
    """
    if theta is not None and not 0.0 <= theta < 1.0:
        raise ValueError(
            f"pruner.params.theta={theta!r} is outside [0, 1): use a value such as 0.5 "
            "(CDPruner/OpenVINO default) or null for plain min-max relevance as quality"
        )
    return Selection.gather(image, conditional_dpp_order(image.embeds, question_embeds, k, theta))


def conditional_dpp_order(
    embeds: torch.Tensor, question_embeds: torch.Tensor, k: int, theta: float | None
) -> torch.Tensor:
    """Returns the (k,) int64 token indices in pick order: greedy DPP picks, then fill by relevance.

    Args:
        embeds: (N, D) post-merger token vectors, any float dtype (computed in fp32).
        question_embeds: (T_q, D) question-token embeddings; T_q = 0 gives constant relevance.
        k: number of tokens, 1 <= k <= N.
        theta: see ``select_cdpruner``.
    """
    unit = F.normalize(embeds.float(), dim=-1)
    relevance = question_relevance(unit, question_embeds)
    quality = relevance if theta is None else torch.exp(theta / (2.0 * (1.0 - theta)) * relevance)
    picks = greedy_dpp_map(unit, quality, k)
    if picks.numel() < k:
        is_picked = torch.zeros(unit.shape[0], dtype=torch.bool, device=unit.device)
        is_picked[picks] = True
        by_relevance = torch.sort(relevance, descending=True, stable=True).indices
        fill = by_relevance[~is_picked[by_relevance]][: k - picks.numel()]
        picks = torch.cat([picks, fill])
    return picks


def question_relevance(unit: torch.Tensor, question_embeds: torch.Tensor) -> torch.Tensor:
    """Returns (N,) fp32 relevance in [0, 1]: min-max normalised cos(token, mean question embedding).

    A near-constant relevance (span <= 1e-6, which includes an empty question) gives 1 for every token,
    so the kernel reduces to the plain similarity DPP instead of dividing by ~0.

    Args:
        unit: (N, D) L2-normalised fp32 token vectors.
        question_embeds: (T_q, D) question-token embeddings.
    """
    ones = torch.ones(unit.shape[0], dtype=unit.dtype, device=unit.device)
    if question_embeds.shape[0] == 0:
        return ones
    query = F.normalize(question_embeds.float().mean(dim=0), dim=0)
    cos = unit @ query.to(unit.device)
    span = cos.max() - cos.min()
    scaled = (cos - cos.min()) / span.clamp_min(_FLAT_SPAN)
    return torch.where(span > _FLAT_SPAN, scaled, ones)


def greedy_dpp_map(unit: torch.Tensor, quality: torch.Tensor, k: int) -> torch.Tensor:
    """Returns up to k int64 indices in greedy MAP order for L = diag(q) S diag(q), S = unit unit^T.

    Chen et al. (NeurIPS 2018), Alg. 1: the marginal gain of i is d_i^2 = L_ii - ||c_i||^2, and after
    picking j every c_i gains e_i = (L_ji - <c_j, c_i>) / d_j. Kernel rows are built on the fly, so memory
    is O(k N) rather than O(N^2). Stops early when the best gain after t picks is at most
    ``_NOISE_PER_PICK`` * t * max_i L_ii (fp32 rounding level, the kernel's rank is exhausted) or not
    positive; ties go to the lowest index.

    Args:
        unit: (N, D) L2-normalised fp32 token vectors.
        quality: (N,) fp32 non-negative quality q.
        k: maximum number of picks.
    """
    # L_ii = q_i^2 exactly (unit rows), so equal qualities tie exactly and go to the lowest index; a zero
    # token vector has L_ii = 0.
    gain = quality.square() * (unit.abs().sum(dim=1) > 0)
    noise_per_pick = _NOISE_PER_PICK * float(gain.max())
    chol = torch.zeros(k, unit.shape[0], dtype=unit.dtype, device=unit.device)
    picks = []
    for t in range(k):
        j = int(torch.argmax(gain))
        best = float(gain[j])
        if best <= noise_per_pick * t or best <= 0.0:
            break
        picks.append(j)
        row = quality[j] * quality * (unit @ unit[j])
        e = (row - chol[:t, j] @ chol[:t]) / best**0.5
        chol[t] = e
        gain = gain - e.square()
        gain[j] = float("-inf")  # stays -inf: picked tokens are never chosen again
    return torch.tensor(picks, dtype=torch.long, device=unit.device)


SPEC = PrunerSpec(name="cdpruner", stage=PRE_LLM, select=select_cdpruner)
