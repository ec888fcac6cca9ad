"""DART (Wen et al., EMNLP 2025): keep the image tokens least duplicated by a few pivot tokens.

Spec 2.5; read in ModelTC/LightCompress ``llmc/compression/token_reduction/dart.py`` (a port of the official
ZichenWen1/DART code). Signals of layer K-1: the post-RoPE keys and the hidden states entering layer K
through the model's final norm. Pivots are the ``pivot_image`` image tokens and the ``pivot_text`` prompt
text tokens after the image with the largest key L1 norm. Each pivot in turn takes, from the image tokens
not yet kept, the ones with the lowest cosine similarity to it (the least duplicated); the image pivots and
all picks are kept, text is always kept.

Our choices where the reference is loose: exactly k tokens per image, so the image pivots are
min(pivot_image, k) and each pivot takes ceil((k - pivots) / (pivots + text pivots)) picks until k are kept
(the reference takes a fixed floor(N (1 - R) / 8) per pivot and keeps about, not exactly, that many); the
pivots act in a fixed order (image pivots by descending key norm, then text pivots likewise; the
reference iterates a Python set); text pivots come from the prompt only (never a response; spec 1.8), and
with several images from the text after this image up to the end of the prompt, other images excluded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F

from sparsectx.layer_selection import ImageSignals
from sparsectx.pruning.base import IN_LLM, PrunerSpec


def _top_norm(keys: torch.Tensor, count: int) -> torch.Tensor:
    """Returns the ``count`` rows of ``keys`` of largest L1 norm, descending (ties: lower index first)."""
    norms = keys.float().abs().sum(-1)
    return torch.sort(-norms, stable=True).indices[: min(count, norms.numel())]


def select_dart(signals: ImageSignals, k: int, *, pivot_image: int, pivot_text: int) -> torch.Tensor:
    """Returns the (k,) ascending indices DART keeps of one image.

    Args:
        signals: the image's and the following prompt text's layer K-1 keys and final-normed hidden states.
        k: tokens to keep, 1 <= k <= N.
        pivot_image: image pivots (the reference's ``pivot_image_token``).
        pivot_text: text pivots (``pivot_text_token``); fewer when the prompt has fewer text tokens after
            the image.
    """
    image_pivots = _top_norm(signals.keys, min(pivot_image, k))
    text_pivots = _top_norm(signals.text_keys, pivot_text)
    hidden = F.normalize(signals.hidden.float(), dim=-1)
    pivot_vectors = torch.cat([hidden[image_pivots], F.normalize(signals.text_hidden.float(), dim=-1)[text_pivots]])
    kept = torch.zeros(signals.num_tokens, dtype=torch.bool, device=hidden.device)
    kept[image_pivots] = True
    needed = k - image_pivots.numel()
    per_pivot = math.ceil(needed / pivot_vectors.shape[0]) if needed else 0
    for vector in pivot_vectors:
        take = min(per_pivot, needed)
        if take == 0:
            break
        similarity = (hidden @ vector).masked_fill(kept, float("inf"))
        picks = torch.sort(similarity, stable=True).indices[:take]
        kept[picks] = True
        needed -= take
    return torch.nonzero(kept).flatten()


def check_dart_params(params: Mapping[str, object]) -> None:
    """Raises ValueError unless ``pruner.params.pivot_image`` is an int >= 1 and ``pivot_text`` one >= 0."""
    for key, low in (("pivot_image", 1), ("pivot_text", 0)):
        value = params[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(
                f"pruner.params.{key}={value!r} must be an integer >= {low} (DART's reference uses 4 "
                "image and 4 text pivots)"
            )


SPEC = PrunerSpec(name="dart", stage=IN_LLM, select=select_dart, param_check=check_dart_params)
