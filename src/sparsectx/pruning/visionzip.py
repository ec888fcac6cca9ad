"""VisionZip (Yang et al., CVPR 2025): dominant tokens by attention plus merged contextual tokens.

Spec 2.1, "Spec for our framework", with the contextual count a fraction f of the kept set (issue 16):
per image of N post-merger tokens and budget k, k_ctx = min(max(1, round(f * k)), k - 1) contextual tokens
and k_dom = k - k_ctx dominant tokens (top by the attention each token receives in the last full-attention
vision block); k = 1 keeps one dominant token. The Qwen port's k_ctx = 5% of N whatever k left a single
dominant token at a 5% budget; a share of k keeps both parts at every budget, as the authors' LLaVA splits
do (10/64 = 20/128 = 30/192). The remaining tokens R (raster
order) give k_ctx targets by uniform stride; every other token of R joins the target whose key is most
cosine-similar, and the target's vector becomes target + mean(members), written into the target's slot so
it keeps the target's position. The same assignment merges every DeepStack level (Qwen3-VL).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sparsectx.pruning.base import PRE_LLM, PrunerSpec
from sparsectx.visual import ImageTokens, Selection


def select_visionzip(
    image: ImageTokens,
    question_embeds: torch.Tensor,
    k: int,
    generator: torch.Generator,
    *,
    contextual_fraction: float,
) -> Selection:
    """Returns k_dom dominant and k_ctx contextual tokens of ``image``, indices ascending.

    Args:
        image: the image's N post-merger tokens; uses ``embeds`` (N, D), ``attention_received`` (N,),
            ``keys`` (N, d_head) and each ``deepstack`` level (N, D).
        question_embeds: (T_q, D) question embeddings; unused (VisionZip is text-agnostic).
        k: tokens to keep, 1 <= k <= N.
        generator: unused (deterministic; ties go to the lowest token index).
        contextual_fraction: f, the fraction of the k kept tokens that are contextual, in (0, 1); rounded
            half to even and clamped so that k >= 2 keeps at least one token of each kind.

    Raises:
        ValueError: ``contextual_fraction`` outside (0, 1) or non-finite attention.
    """
    if not 0.0 < contextual_fraction < 1.0:
        raise ValueError(
            f"pruner.params.contextual_fraction={contextual_fraction!r} is outside (0, 1): it is the "
            "fraction of the kept tokens k that are contextual (0.5 gives 5% + 5% of N at a 10% budget)"
        )
    if not bool(torch.isfinite(image.attention_received).all()):
        raise ValueError("image.attention_received has non-finite entries; VisionZip cannot rank them")
    n = image.num_tokens
    k_ctx = contextual_count(k, contextual_fraction)
    dominant = dominant_tokens(image.attention_received, k - k_ctx)
    if k_ctx == 0:
        return Selection.gather(image, dominant)
    is_dominant = torch.zeros(n, dtype=torch.bool, device=dominant.device)
    is_dominant[dominant] = True
    rest = torch.nonzero(~is_dominant).squeeze(1)
    step = max(1, rest.numel() // k_ctx)
    targets = rest[::step][:k_ctx]
    is_target = torch.zeros(n, dtype=torch.bool, device=dominant.device)
    is_target[targets] = True
    members = rest[~is_target[rest]]
    assign = assign_to_targets(image.keys, targets, members)
    keep = torch.sort(torch.cat([dominant, targets])).values
    merged = [merge_into_targets(f, targets, members, assign)[keep] for f in (image.embeds, *image.deepstack)]
    return Selection(indices=keep, embeds=merged[0], deepstack=tuple(merged[1:]))


def contextual_count(k: int, contextual_fraction: float) -> int:
    """Returns k_ctx = min(max(1, round(f * k)), k - 1): 0 for k = 1, else between 1 and k - 1."""
    return min(max(1, round(contextual_fraction * k)), k - 1)


def dominant_tokens(attention: torch.Tensor, k_dom: int) -> torch.Tensor:
    """Returns the (k_dom,) int64 indices of the largest ``attention`` (N,) entries, ties to lowest index."""
    return torch.sort(attention.float(), descending=True, stable=True).indices[:k_dom]


def assign_to_targets(keys: torch.Tensor, targets: torch.Tensor, members: torch.Tensor) -> torch.Tensor:
    """Returns (M,) int64 positions in ``targets`` of each member's most key-cosine-similar target.

    Args:
        keys: (N, d_head) key metric, compared in fp32 after L2 normalisation.
        targets: (C,) int64 token indices of the contextual targets.
        members: (M,) int64 token indices to assign; ties go to the earliest target.
    """
    unit = F.normalize(keys.float(), dim=-1)
    return torch.argmax(unit[members] @ unit[targets].T, dim=1)


def merge_into_targets(
    features: torch.Tensor, targets: torch.Tensor, members: torch.Tensor, assign: torch.Tensor
) -> torch.Tensor:
    """Returns a (N, D) copy of ``features`` where each target row is target + mean of its members' rows.

    A target without members keeps its row unchanged (VisionZip adds the members' mean to the target; it
    does not average the target in). Accumulates in at least fp32 and casts back to ``features.dtype``.

    Args:
        features: (N, D) post-merger embeddings or one DeepStack level.
        targets: (C,) int64 token indices of the contextual targets.
        members: (M,) int64 token indices of the assigned tokens.
        assign: (M,) int64 position in ``targets`` of each member.
    """
    acc = torch.promote_types(features.dtype, torch.float32)
    sums = torch.zeros(targets.numel(), features.shape[1], dtype=acc, device=features.device)
    sums.index_add_(0, assign, features[members].to(acc))
    counts = torch.bincount(assign, minlength=targets.numel())
    has = counts > 0
    merged = features[targets[has]].to(acc) + sums[has] / counts[has].unsqueeze(1).to(acc)
    out = features.clone()
    out[targets[has]] = merged.to(features.dtype)
    return out


SPEC = PrunerSpec(name="visionzip", stage=PRE_LLM, select=select_visionzip, merges=True)
