"""In-LLM token selection (hook L_K): score each image from decoder layer K-1's signals, keep exactly k.

FastV and DART register in ``PRUNERS`` like the pre-LLM operators, with the in-LLM signature
``(signals: ImageSignals, k, **params) -> (k,) indices``. ``select_in_llm`` runs layers 0..K-1 once over the
batch's full prompt contexts (prompt only: a selection never sees a response, design invariant 5), cuts
each image's signals out, calls the operator and returns one ``LayerSelection`` per image, which
``build_context`` turns into a context that holds every token until layer K.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from sparsectx.budget import tokens_to_keep
from sparsectx.context import build_context, keep_all
from sparsectx.encoding import EncodedSample
from sparsectx.layer_selection import ImageSignals, LayerSelection
from sparsectx.models.adapter import VLMAdapter
from sparsectx.models.in_llm import LayerSignals
from sparsectx.pruning import IN_LLM_PRUNERS, PRUNERS, check_params
from sparsectx.visual import ImageTokens, Selection


def image_signals(
    signals: LayerSignals, row: int, sample: EncodedSample, start: int, image_token_id: int
) -> list[ImageSignals]:
    """Returns each image's signals from row ``row`` of a batch whose sample starts at slot ``start``."""
    is_image = sample.prompt_ids == image_token_id
    slots = torch.nonzero(is_image).flatten()
    text = ~is_image
    out, offset = [], 0
    for image in sample.images:
        own = slots[offset : offset + image.num_tokens]
        offset += image.num_tokens
        after = text.clone()
        after[: int(own[-1]) + 1] = False
        text_slots = torch.nonzero(after).flatten() + start
        own = own + start
        out.append(
            ImageSignals(
                attention=signals.attention[row, own],
                keys=signals.keys[row, own],
                hidden=signals.hidden[row, own],
                text_keys=signals.keys[row, text_slots],
                text_hidden=signals.hidden[row, text_slots],
            )
        )
    return out


def _checked(name: str, indices: torch.Tensor, image: ImageTokens, k: int, layer: int) -> LayerSelection:
    """Returns the ``LayerSelection`` of ``indices``; raises RuntimeError unless they are k ascending in-range ints."""
    n = image.num_tokens
    ok = indices.dtype == torch.int64 and indices.ndim == 1 and indices.numel() == k
    ok = ok and int(indices.min()) >= 0 and int(indices.max()) < n
    ok = ok and (k == 1 or bool((indices[1:] > indices[:-1]).all()))
    if not ok:
        raise RuntimeError(
            f"pruner {name!r} broke its contract on an image of N={n} tokens, k={k}: returned "
            f"{indices.dtype} of shape {tuple(indices.shape)} ({indices.tolist()[:8]}...), not k ascending indices"
        )
    plain = Selection.gather(image, indices)
    return LayerSelection(plain.indices, plain.embeds, plain.deepstack, layer=layer)


@torch.no_grad()
def select_in_llm(
    adapter: VLMAdapter,
    samples: list[EncodedSample],
    name: str,
    budget: float,
    params: Mapping[str, object],
    layer: int,
) -> list[list[Selection]]:
    """Returns per sample one ``LayerSelection`` per image: k = clamp(round(b N_i), 1, N_i) tokens from layer K on.

    Args:
        adapter: the model adapter (runs layers 0..K-1).
        samples: encoded prompts (their images and prompt ids; never a response).
        name: an in-LLM registry key (``IN_LLM_PRUNERS``).
        budget: kept fraction of each image's tokens, in (0, 1].
        params: the operator's keyword arguments (the YAML's ``params``), exactly its keyword-only names.
        layer: K, the first decoder layer without the dropped tokens.
    """
    operator = PRUNERS.get(name)
    if name not in IN_LLM_PRUNERS:
        raise ValueError(
            f"pruner {name!r} is a pre-LLM operator; select with sparsectx.pruning.select_tokens"
        )
    check_params(name, operator, params)
    out: list[list[Selection]] = [[] for _ in samples]
    pictured = [b for b, s in enumerate(samples) if s.images]
    if not pictured:
        return out
    chosen = [samples[b] for b in pictured]
    ctx = build_context(adapter, chosen, [keep_all(s) for s in chosen])
    signals = adapter.llm_signals(ctx.inputs, layer, ctx.prompt_end - 1)
    width = ctx.inputs.embeds.shape[1]
    for row, (b, sample) in enumerate(zip(pictured, chosen, strict=True)):
        start = width - sample.prompt_ids.numel()
        per_image = image_signals(signals, row, sample, start, adapter.image_token_id)
        for image, sig in zip(sample.images, per_image, strict=True):
            k = tokens_to_keep(budget, image.num_tokens)
            indices = operator(sig, k, **dict(params))
            out[b].append(_checked(name, indices, image, k, layer))
    return out
