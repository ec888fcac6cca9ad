"""In-LLM token selection (hook L_K): score each image from decoder layer K-1's signals, keep exactly k.

FastV and DART declare ``stage=IN_LLM`` in their ``PrunerSpec``, with the in-LLM signature
``(signals: ImageSignals, k, **params) -> (k,) indices`` (``pruning.base.SelectInLLM``). ``select_in_llm`` runs
layers 0..K-1 once over the batch's full prompt contexts (prompt only: a selection never sees a response,
design invariant 5), cuts each image's signals out, calls the operator and returns one ``LayerSelection`` per
image, which ``build_context`` turns into a context that holds every token until layer K. ``fused_prompts``
instead lets the engine's prefill choose on its way through layer K-1, so layers < K run once (evaluation's
greedy and efficiency modes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

import torch

from sparsectx.budget import tokens_to_keep
from sparsectx.context import ContextBatch, build_context, keep_all
from sparsectx.encoding import EncodedSample
from sparsectx.engine.prompts import Prompts
from sparsectx.layer_selection import ImageSignals, LayerSelection
from sparsectx.models.adapter import VLMAdapter
from sparsectx.models.in_llm import LateDrop, LayerSignals
from sparsectx.pruning import PRUNERS, check_params
from sparsectx.pruning.base import IN_LLM, SelectInLLM
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
    """Returns the ``LayerSelection`` of ``indices``; raises RuntimeError unless k ascending in-range ints."""
    n = image.num_tokens
    ok = indices.dtype == torch.int64 and indices.ndim == 1 and indices.numel() == k
    ok = ok and int(indices.min()) >= 0 and int(indices.max()) < n
    ok = ok and (k == 1 or bool((indices[1:] > indices[:-1]).all()))
    if not ok:
        raise RuntimeError(
            f"pruner {name!r} broke its contract on an image of N={n} tokens, k={k}: returned "
            f"{indices.dtype} of shape {tuple(indices.shape)} ({indices.tolist()[:8]}...), "
            "not k ascending indices"
        )
    plain = Selection.gather(image, indices)
    return LayerSelection(plain.indices, plain.embeds, plain.deepstack, layer=layer)


def _operator(name: str, params: Mapping[str, object]) -> SelectInLLM:
    """Returns in-LLM operator ``name`` after checking it is one and that ``params`` match its arguments."""
    spec = PRUNERS.get(name)
    if spec.stage != IN_LLM:
        raise ValueError(f"pruner {name!r} is a pre-LLM operator; select with sparsectx.pruning.select_tokens")
    check_params(spec, params)
    return spec.select  # type: ignore[return-value]


def select_rows(
    adapter: VLMAdapter,
    samples: list[EncodedSample],
    signals: LayerSignals,
    rule: tuple[str, float, Mapping[str, object], int],
) -> list[list[LayerSelection]]:
    """Returns each row's per-image ``LayerSelection`` from a batch's layer signals (row b = ``samples[b]``,
    left-padded prompts; ``rule`` = (operator name, budget, params, layer K))."""
    name, budget, params, layer = rule
    operator = _operator(name, params)
    width, out = signals.attention.shape[1], []
    for row, sample in enumerate(samples):
        start = width - sample.prompt_ids.numel()
        per_image = image_signals(signals, row, sample, start, adapter.image_token_id)
        chosen = []
        for image, sig in zip(sample.images, per_image, strict=True):
            k = tokens_to_keep(budget, image.num_tokens)
            chosen.append(_checked(name, operator(sig, k, **dict(params)), image, k, layer))
        out.append(chosen)
    return out


@torch.no_grad()
def select_in_llm(
    adapter: VLMAdapter,
    samples: list[EncodedSample],
    name: str,
    budget: float,
    params: Mapping[str, object],
    layer: int,
) -> list[list[Selection]]:
    """Returns per sample one ``LayerSelection`` per image: k = clamp(round(b N_i), 1, N_i) tokens after K.

    Args:
        adapter: the model adapter (runs layers 0..K-1).
        samples: encoded prompts (their images and prompt ids; never a response).
        name: the registry key of an in-LLM operator (``PrunerSpec.stage == IN_LLM``).
        budget: kept fraction of each image's tokens, in (0, 1].
        params: the operator's keyword arguments (the YAML's ``params``), exactly its keyword-only names.
        layer: K, the first decoder layer without the dropped tokens.
    """
    _operator(name, params)
    out: list[list[Selection]] = [[] for _ in samples]
    pictured = [b for b, s in enumerate(samples) if s.images]
    if not pictured:
        return out
    chosen = [samples[b] for b in pictured]
    ctx = build_context(adapter, chosen, [keep_all(s) for s in chosen])
    signals = adapter.llm_signals(ctx.inputs, layer, ctx.prompt_end - 1)
    rule = (name, budget, params, layer)
    for b, selections in zip(pictured, select_rows(adapter, chosen, signals, rule), strict=True):
        out[b] = list(selections)
    return out


def restore_selections(
    samples: list[EncodedSample], kept: list[list[torch.Tensor]], layer: int
) -> list[list[Selection]]:
    """Returns the ``LayerSelection``s of stored kept indices (per sample, per image), dropped at ``layer``.

    An in-LLM selection keeps its image's own vectors, so its indices alone rebuild it exactly.
    """
    out = []
    for sample, indices in zip(samples, kept, strict=True):
        plain = [
            Selection.gather(image, idx.to(image.embeds.device))
            for image, idx in zip(sample.images, indices, strict=True)
        ]
        out.append([LayerSelection(p.indices, p.embeds, p.deepstack, layer=layer) for p in plain])
    return out


def fused_prompts(
    adapter: VLMAdapter,
    samples: Sequence[EncodedSample],
    name: str,
    budget: float,
    params: Mapping[str, object],
    layer: int,
) -> Prompts:
    """Returns engine prompts whose prefill selects on its way through layer K-1 (one pass, no second one).

    Each built batch holds every token with a ``LateDrop`` whose ``select`` runs ``select_rows`` on the
    prefill's own layer K-1 signals; the choice equals ``select_in_llm``'s up to the batch's float rounding.
    ``kept_visual`` is the exact k per image. Greedy evaluation and the efficiency mode's latency use it;
    training and Pass@K, which record or reuse the indices, select first with ``select_in_llm``.
    """
    _operator(name, params)
    rule = (name, budget, params, layer)

    def build(indices: Sequence[int]) -> ContextBatch:
        chosen = [samples[i] for i in indices]
        ctx = build_context(adapter, chosen, [keep_all(s) for s in chosen])
        if any(s.images for s in chosen):
            select = partial(_keep_mask, adapter, chosen, rule, ctx.inputs.attention_mask.bool())
            ctx.inputs.late = LateDrop(layer, None, select)
        kept = [sum(tokens_to_keep(budget, im.num_tokens) for im in s.images) for s in chosen]
        ctx.kept_visual = torch.tensor(kept, dtype=torch.long, device=ctx.kept_visual.device)
        return ctx

    return Prompts([s.prompt_ids.numel() for s in samples], build)


def _keep_mask(
    adapter: VLMAdapter,
    samples: list[EncodedSample],
    rule: tuple[str, float, Mapping[str, object], int],
    valid: torch.Tensor,
    signals: LayerSignals,
) -> torch.Tensor:
    """Returns the (B, L) keep mask of ``select_rows``'s choice: every real slot but the dropped visual."""
    keep = valid.clone()
    width = keep.shape[1]
    for row, (sample, selections) in enumerate(zip(samples, select_rows(adapter, samples, signals, rule), strict=True)):
        slots = torch.nonzero(sample.prompt_ids == adapter.image_token_id).flatten() + width - sample.prompt_ids.numel()
        offset = 0
        for image, selection in zip(sample.images, selections, strict=True):
            own = slots[offset : offset + image.num_tokens]
            keep[row, own] = False
            keep[row, own[selection.indices]] = True
            offset += image.num_tokens
    return keep
