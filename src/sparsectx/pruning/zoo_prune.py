"""ZOO-Prune (Kim et al., CVPR 2026): zeroth-order sensitivity at the merger, then sensitivity-aware diversity.

Spec 2.8, read against the authors' released code (AIM-SKKU/ZOO-Prune, LLaVA/llava/model/llava_arch.py:
the sensitivity block of ``prepare_inputs_labels_for_multimodal`` and ``select_tokens_sads``; the defaults
in run_zoo_prune.sh). The sensitivity s_i of merged token i is estimated in the encode path
(``sparsectx.models.vision_signals.merger_sensitivity``): the mean over m random unit directions u_j of
||f(x_i + h u_j) - f(x_i - h u_j)|| / (2h), f the merger (the authors' projector). Selection (their SADS):
w = min-max normalised s (all ones when s is constant); the first pick maximises w, every later pick the
product of w and the cosine distance 1 - cos to its nearest picked token, over post-merger embeddings
(the authors pass the projected features), picked tokens masked. The authors' k = int(ratio * N) becomes
our exact k; their directions come from the global RNG, ours from a seed derived from the run's seed.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from sparsectx.pruning.base import PRE_LLM, PrunerSpec
from sparsectx.seeding import derive_seed
from sparsectx.visual import ImageTokens, MergerProbe, Selection, VisionSignals

# The authors' guard in the min-max normalisation of the sensitivity.
_NORMALISE_EPS = 1e-8


def select_zoo_prune(
    image: ImageTokens,
    question_embeds: torch.Tensor,
    k: int,
    generator: torch.Generator,
    *,
    probes: int,
    step: float,
) -> Selection:
    """Returns the k tokens of ``image`` that sensitivity-aware diverse selection picks, indices ascending.

    Args:
        image: the image's N post-merger tokens; uses ``embeds`` (N, D) and ``merger_sensitivity`` (N,),
            the declared signal that ``probes`` and ``step`` parameterise (see ``zoo_prune_signals``).
        question_embeds: (T_q, D) question embeddings; unused (ZOO-Prune is text-agnostic).
        k: tokens to keep, 1 <= k <= N.
        generator: unused (the only randomness, the probe directions, is seeded in the encode path).
        probes: m, directions per token of the sensitivity estimate.
        step: h, the central-difference step.

    Raises:
        ValueError: ``image`` carries no merger sensitivity, or it has non-finite entries.
    """
    if image.merger_sensitivity is None:
        raise ValueError(
            "zoo_prune reads ImageTokens.merger_sensitivity, which this image lacks: the encode path "
            "estimates it only when the adapter's vision_signals ask for it (adapter.vision_signals = "
            "sparsectx.pruning.declared_signals('zoo_prune', params, seed) before encoding)"
        )
    if not bool(torch.isfinite(image.merger_sensitivity).all()):
        raise ValueError("image.merger_sensitivity has non-finite entries; ZOO-Prune cannot rank them")
    return Selection.gather(image, sensitivity_diverse_order(image.embeds, image.merger_sensitivity, k))


def sensitivity_weights(sensitivity: torch.Tensor) -> torch.Tensor:
    """Returns (N,) fp32 w = (s - min s) / (max s - min s + 1e-8), or all ones when s is constant."""
    s = sensitivity.float()
    low, high = s.min(), s.max()
    if not bool(high > low):
        return torch.ones_like(s)
    return (s - low) / (high - low + _NORMALISE_EPS)


def sensitivity_diverse_order(features: torch.Tensor, sensitivity: torch.Tensor, k: int) -> torch.Tensor:
    """Returns the (k,) int64 token indices in the order sensitivity-aware diverse selection picks them.

    Pick 1 maximises w_i; pick t maximises w_i * min_{s < t} (1 - cos(x_i, x_pick_s)) over unpicked i, kept
    as a running minimum (the authors recompute it over all picks each step). Ties go to the lowest index.

    Args:
        features: (N, D) post-merger embeddings, any float dtype; cosines in fp32.
        sensitivity: (N,) merger sensitivity s.
        k: number of picks, 1 <= k <= N.
    """
    x = F.normalize(features.float(), dim=-1)
    weight = sensitivity_weights(sensitivity).to(x.device)
    picks = torch.empty(k, dtype=torch.long, device=x.device)
    picked = torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)
    picks[0] = torch.argmax(weight)
    nearest = torch.full_like(weight, float("inf"))
    for t in range(1, k):
        picked[picks[t - 1]] = True
        nearest = torch.minimum(nearest, 1.0 - x @ x[picks[t - 1]])
        picks[t] = torch.argmax((nearest * weight).masked_fill(picked, float("-inf")))
    return picks


def check_zoo_prune_params(params: Mapping[str, object]) -> None:
    """Raises ValueError unless ``pruner.params.probes`` is an int >= 1 and ``pruner.params.step`` a float > 0."""
    probes, step = params["probes"], params["step"]
    if isinstance(probes, bool) or not isinstance(probes, int) or probes < 1:
        raise ValueError(
            f"pruner.params.probes={probes!r} must be an integer >= 1: the number of random directions the "
            "merger sensitivity averages over (the authors use 64)"
        )
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not 0.0 < float(step) < float("inf"):
        raise ValueError(
            f"pruner.params.step={step!r} must be a finite number > 0: the central-difference step h along "
            "each unit direction (the authors use 0.01)"
        )


def zoo_prune_signals(params: Mapping[str, object], seed: int) -> VisionSignals:
    """Returns the merger-sensitivity probe, its directions seeded by ``derive_seed(seed, "zoo_prune")``."""
    probe = MergerProbe(int(params["probes"]), float(params["step"]), derive_seed(seed, "zoo_prune"))
    return VisionSignals(merger_probe=probe)


SPEC = PrunerSpec(
    name="zoo_prune",
    stage=PRE_LLM,
    select=select_zoo_prune,
    param_check=check_zoo_prune_params,
    signals=zoo_prune_signals,
)
