"""Build language-model inputs from encoded samples and per-image selections.

Dropped image tokens are physically removed; kept tokens stay in raster order; every kept token and
every text token keeps the position it has in the unpruned sequence, and response tokens continue at
the unpruned model's next position. Batches are left-padded, which serves generation and scoring alike.

An in-LLM selection (``LayerSelection``) keeps all of its image's tokens in the context and marks the
dropped ones in ``LLMInputs.late``: they leave before decoder layer K (``sparsectx.models.in_llm``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparsectx.encoding import EncodedSample
from sparsectx.layer_selection import LayerSelection
from sparsectx.models.adapter import LLMInputs, VLMAdapter
from sparsectx.models.in_llm import LateDrop
from sparsectx.visual import ImageTokens, Selection


@dataclass
class ContextBatch:
    """A left-padded batch of pruned contexts, optionally followed by teacher-forced responses.

    Attributes:
        inputs: the LLM inputs, (B, L) after padding.
        prompt_end: (B,) index in the padded batch of the first response slot (= end of the prompt).
        response_lengths: (B,) number of response tokens appended (0 for generation prompts).
        next_position: (B,) position the next generated token takes (after any appended response).
        kept_visual: (B,) number of visual tokens each context keeps (after layer K for in-LLM selections).
    """

    inputs: LLMInputs
    prompt_end: torch.Tensor
    response_lengths: torch.Tensor
    next_position: torch.Tensor
    kept_visual: torch.Tensor


def keep_all(sample: EncodedSample) -> list[Selection]:
    """Returns the selections that keep every visual token of ``sample`` (the full-context view)."""
    return [Selection.keep_all(image) for image in sample.images]


def _in_context(image: ImageTokens, selection: Selection) -> Selection:
    """Returns the tokens of ``image`` the context holds: all of them for an in-LLM selection."""
    return Selection.keep_all(image) if isinstance(selection, LayerSelection) else selection


def _sample_pieces(
    adapter: VLMAdapter, sample: EncodedSample, selections: list[Selection], response: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor], int, torch.Tensor]:
    """Returns one sample's (embeds, positions, visual mask, deepstack rows, prompt length, late keep).

    ``late keep`` is False exactly at the slots of tokens an in-LLM selection drops before its layer K.
    """
    if len(selections) != len(sample.images):
        raise ValueError(
            f"sample {sample.sample_id!r} has {len(sample.images)} images but {len(selections)} selections"
        )
    held = [_in_context(image, s) for image, s in zip(sample.images, selections, strict=True)]
    is_visual = sample.prompt_ids == adapter.image_token_id
    keep = ~is_visual
    visual_slots = torch.nonzero(is_visual).flatten()
    late_keep = torch.ones_like(keep)
    offset = 0
    for image, selection, in_ctx in zip(sample.images, selections, held, strict=True):
        keep[visual_slots[offset + in_ctx.indices]] = True
        if selection is not in_ctx:
            late_keep[visual_slots[offset : offset + image.num_tokens]] = False
            late_keep[visual_slots[offset + selection.indices]] = True
        offset += image.num_tokens
    ids = sample.prompt_ids[keep]
    late_keep = late_keep[keep]
    positions = sample.positions[:, keep]
    embeds = adapter.embed_ids(ids)
    visual = ids == adapter.image_token_id
    embeds = embeds.clone()
    if held:
        embeds[visual] = torch.cat([s.embeds for s in held]).to(embeds.dtype)
    levels = len(held[0].deepstack) if held else 0
    deepstack = [torch.cat([s.deepstack[level] for s in held]) for level in range(levels)]
    prompt_len = ids.numel()
    if response is not None and response.numel():
        steps = torch.arange(response.numel(), device=positions.device) + sample.next_position
        embeds = torch.cat([embeds, adapter.embed_ids(response.to(ids.device))])
        positions = torch.cat([positions, steps.expand(3, -1)], dim=1)
        visual = torch.cat([visual, torch.zeros(response.numel(), dtype=torch.bool, device=visual.device)])
        late_keep = torch.cat([late_keep, torch.ones(response.numel(), dtype=torch.bool, device=visual.device)])
    return embeds, positions, visual, deepstack, prompt_len, late_keep


def drop_layer(selections: list[list[Selection]]) -> int | None:
    """Returns the layer K of the batch's in-LLM selections (None if there are none).

    Raises:
        ValueError: the selections drop tokens before different layers (one batch has one K).
    """
    layers = {s.layer for sel in selections for s in sel if isinstance(s, LayerSelection)}
    if len(layers) > 1:
        raise ValueError(f"one batch mixes in-LLM selections for layers {sorted(layers)}; K must be shared")
    return layers.pop() if layers else None


def build_context(
    adapter: VLMAdapter,
    samples: list[EncodedSample],
    selections: list[list[Selection]],
    responses: list[torch.Tensor] | None = None,
) -> ContextBatch:
    """Returns the left-padded LLM inputs for ``samples`` with their kept tokens (and responses, if given).

    Args:
        adapter: the model adapter (embeds text ids).
        samples: encoded prompts.
        selections: per sample, one ``Selection`` per image (``keep_all`` for the full context); a
            ``LayerSelection`` keeps every token of its image until its layer K.
        responses: per sample, (T_b,) int64 response ids to append for teacher forcing; None for generation.
    """
    pieces = [
        _sample_pieces(adapter, s, sel, None if responses is None else responses[b])
        for b, (s, sel) in enumerate(zip(samples, selections, strict=True))
    ]
    lengths = [p[0].shape[0] for p in pieces]
    width = max(lengths)
    batch, dim = len(pieces), pieces[0][0].shape[1]
    ref = pieces[0][0]
    embeds = ref.new_zeros(batch, width, dim)
    positions = torch.zeros(3, batch, width, dtype=torch.long, device=ref.device)
    mask = torch.zeros(batch, width, dtype=torch.long, device=ref.device)
    visual = torch.zeros(batch, width, dtype=torch.bool, device=ref.device)
    late_keep = torch.zeros(batch, width, dtype=torch.bool, device=ref.device)
    prompt_end, resp_len, kept = [], [], []
    for b, (emb, pos, vis, _, plen, late) in enumerate(pieces):
        start = width - lengths[b]
        embeds[b, start:] = emb
        positions[:, b, start:] = pos
        mask[b, start:] = 1
        visual[b, start:] = vis
        late_keep[b, start:] = late
        prompt_end.append(start + plen)
        resp_len.append(lengths[b] - plen)
        kept.append(int((vis & late).sum()))
    levels = max(len(p[3]) for p in pieces)  # a sample without images has no DeepStack rows
    deepstack = tuple(torch.cat([p[3][level] for p in pieces if p[3]]) for level in range(levels))
    next_pos = [s.next_position + r for s, r in zip(samples, resp_len, strict=True)]
    as_tensor = lambda v: torch.tensor(v, dtype=torch.long, device=ref.device)  # noqa: E731
    layer = drop_layer(selections)
    late = None if layer is None else LateDrop(layer, late_keep)
    return ContextBatch(
        inputs=LLMInputs(embeds, mask, positions, visual, deepstack, late),
        prompt_end=as_tensor(prompt_end),
        response_lengths=as_tensor(resp_len),
        next_position=as_tensor(next_pos),
        kept_visual=as_tensor(kept),
    )
