"""The in-LLM hook point (spec 1.4, hook L_K): visual tokens dropped between decoder layers K-1 and K.

Layers 0..K-1 see every token of the context; before layer K the dropped visual slots are removed from the
hidden states, from the rotary cos/sin (so kept tokens keep their unpruned M-RoPE positions, spec 1.3) and
from the mask, and layers K.. run on the rest. With a cache, layers < K store every token and layers >= K
only the kept ones; ``layer_masks`` gives each layer's valid-key mask so the engine attends each layer group
to its own keys. Qwen3-VL's DeepStack additions after layers >= K use only the kept rows (spec 3, item 6).

``layer_signals`` runs layers 0..K-1 and returns what FastV and DART score with: the attention row of the
last prompt token at layer K-1, recomputed for that one row from the layer's own q/k projections (spec 1.6;
the LLM is never switched to eager attention), the layer's post-RoPE keys and the hidden states entering
layer K through the model's final norm (spec 2.5). A ``LateDrop`` without ``keep`` but with ``select`` has
the prefill compute the same signals on its way through layer K-1 and choose there (one pass, as a fused
implementation runs; ``sparsectx.pruning.layer.fused_prompts``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from transformers.masking_utils import create_causal_mask

from sparsectx.models.adapter import LLMInputs


@dataclass
class LateDrop:
    """Visual slots removed before decoder layer ``layer``.

    Attributes:
        layer: K, 1 <= K < number of decoder layers; layers < K see every slot.
        keep: (B, L) bool over the context's slots: True = the slot continues into layers >= K (text, kept
            visual tokens); False for dropped visual tokens and padding. None = chosen in the forward by
            ``select`` and stored here (prompt-only contexts: each row's query is its last slot).
        select: maps layer K-1's ``LayerSignals`` of the batch to ``keep``; used only when ``keep`` is None.
    """

    layer: int
    keep: torch.Tensor | None
    select: Callable[[LayerSignals], torch.Tensor] | None = None


@dataclass
class LayerSignals:
    """What layer K-1 tells an in-LLM pruner, in the context's (B, L) slot layout.

    Attributes:
        attention: (B, L) fp32 softmax attention of each row's query slot (its last prompt token) at
            layer K-1, mean over heads; 0 at keys after the query and at padding.
        keys: (B, L, KV * d) fp32 post-RoPE keys of layer K-1 (after Qwen3-VL's k_norm), heads flattened.
        hidden: (B, L, D) fp32 hidden states entering layer K, passed through the model's final norm.
    """

    attention: torch.Tensor
    keys: torch.Tensor
    hidden: torch.Tensor


def compact(keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (index, mask), both (B, L'): each row's kept slots in order, left-padded to the widest row.

    ``index`` points into the L slots (padding entries point at some dropped slot); ``mask`` is 1 at real
    entries. L' = the largest kept count.
    """
    width = int(keep.sum(1).max())
    order = torch.argsort(keep.to(torch.int8), dim=1, stable=True)  # dropped slots first, order kept
    index = order[:, keep.shape[1] - width :]
    return index, keep.gather(1, index).long()


def layer_masks(inputs: LLMInputs, num_layers: int) -> list[torch.Tensor]:
    """Returns per decoder layer the (B, W_l) valid-key mask of the keys a prefill of ``inputs`` cached.

    Called after the prefill: a fused selection (``LateDrop.select``) has filled ``keep`` by then.
    """
    full = inputs.attention_mask
    if inputs.late is None:
        return [full] * num_layers
    late = compact(inputs.late.keep)[1]
    return [full if layer < inputs.late.layer else late for layer in range(num_layers)]


def _check_layers(text_model: nn.Module, layer: int) -> None:
    count = len(text_model.layers)
    if not 1 <= layer < count:
        raise ValueError(f"pruner.layer={layer} must lie in [1, {count - 1}] for a {count}-layer LLM")
    if getattr(text_model, "has_sliding_layers", False):
        raise ValueError(
            "pruner.stage=llm needs a decoder of full-attention layers only, and this one has sliding-window "
            "layers: choose a pre-LLM pruner (pruner.stage=pre_llm)"
        )


def _run_layer(
    text_model: nn.Module,
    index: int,
    hidden: torch.Tensor,
    mask: torch.Tensor | None,
    rotary: tuple[torch.Tensor, torch.Tensor],
    cache: object | None,
    visual: torch.Tensor,
    deepstack: list[torch.Tensor],
) -> torch.Tensor:
    """Returns decoder layer ``index``'s output, plus DeepStack level ``index`` at the visual slots if any."""
    hidden = text_model.layers[index](
        hidden,
        attention_mask=mask,
        position_ids=None,
        past_key_values=cache,
        use_cache=cache is not None,
        position_embeddings=rotary,
    )
    if index < len(deepstack):
        hidden = hidden.clone()
        hidden[visual] = hidden[visual] + deepstack[index].to(hidden.dtype)
    return hidden


def _start(text_model: nn.Module, inputs: LLMInputs, cache: object | None, deepstack_on: bool):
    """Returns (rotary cos/sin, the 4D mask of the full context, the DeepStack levels) of ``inputs``."""
    rotary = text_model.rotary_emb(inputs.embeds, inputs.positions)
    mask = create_causal_mask(text_model.config, inputs.embeds, inputs.attention_mask, cache)
    deepstack = list(inputs.deepstack) if deepstack_on else []
    return rotary, mask, deepstack


def run_with_drop(text_model: nn.Module, inputs: LLMInputs, cache: object | None, deepstack_on: bool) -> torch.Tensor:
    """Returns (B, L, D) final-norm hidden states with ``inputs.late``'s slots dropped before its layer K.

    Rows of dropped slots are zero (nothing may read them); every kept slot sits where it is in ``inputs``,
    so response positions index the output as they index an unpruned forward. ``cache`` (a transformers
    Cache, empty) receives every slot's keys in layers < K and the kept ones, left-padded as ``compact``
    lays them out, in layers >= K. A ``LateDrop`` without ``keep`` gets it here from its ``select`` rule on
    layer K-1's signals (the attention row of each row's last slot, keys, normed hidden states entering K).
    """
    drop = inputs.late
    _check_layers(text_model, drop.layer)
    rotary, mask, deepstack = _start(text_model, inputs, cache, deepstack_on)
    hidden, visual = inputs.embeds, inputs.visual_mask
    for i in range(drop.layer - 1):
        hidden = _run_layer(text_model, i, hidden, mask, rotary, cache, visual, deepstack)
    probe = None
    if drop.keep is None:  # fused: each row's query is its last slot (a prompt-only prefill)
        last = torch.full((hidden.shape[0],), hidden.shape[1] - 1, device=hidden.device)
        probe = _probe(text_model, drop.layer, hidden, rotary, last, inputs)
    hidden = _run_layer(text_model, drop.layer - 1, hidden, mask, rotary, cache, visual, deepstack)
    if probe is not None:
        with torch.no_grad():
            drop.keep = drop.select(LayerSignals(*probe, text_model.norm(hidden).float()))
    index, late_mask = compact(drop.keep)
    take = lambda t: t.gather(1, index[..., None].expand(-1, -1, t.shape[-1]))  # noqa: E731
    full_shape = hidden.shape
    hidden, rotary = take(hidden), (take(rotary[0]), take(rotary[1]))
    rows = drop.keep[visual]  # DeepStack rows are the visual slots in row-major order
    deepstack = [level[rows.to(level.device)] for level in deepstack]
    visual = visual.gather(1, index) & late_mask.bool()
    mask = create_causal_mask(text_model.config, hidden, late_mask, cache, layer_idx=drop.layer)
    for i in range(drop.layer, len(text_model.layers)):
        hidden = _run_layer(text_model, i, hidden, mask, rotary, cache, visual, deepstack)
    hidden = text_model.norm(hidden)
    out = hidden.new_zeros(full_shape)
    real = late_mask.bool()[..., None]
    return out.scatter(1, index[..., None].expand(-1, -1, full_shape[-1]), hidden * real)


def _project(
    attention: nn.Module, normed: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns the rotated (B, H, L, d) queries and (B, KV, L, d) keys an attention module computes."""
    shape = (*normed.shape[:-1], -1, attention.head_dim)
    query = attention.q_proj(normed).view(shape)
    key = attention.k_proj(normed).view(shape)
    if hasattr(attention, "q_norm"):  # Qwen3-VL: per-head RMSNorm before RoPE
        query, key = attention.q_norm(query), attention.k_norm(key)
    # The decoder's own rotary function: GLM-4.6V rotates interleaved pairs of a partial head dimension.
    rotate = sys.modules[type(attention).__module__].apply_rotary_pos_emb
    return rotate(query.transpose(1, 2), key.transpose(1, 2), *rotary)


def _query_row(
    query: torch.Tensor, key: torch.Tensor, scaling: float, query_index: torch.Tensor, valid: torch.Tensor
) -> torch.Tensor:
    """Returns (B, L) fp32 attention of slot ``query_index[b]`` over the valid keys up to it, head mean."""
    batch, heads, width, dim = query.shape
    rows = torch.arange(batch, device=query.device)
    q = query[rows, :, query_index].float()  # (B, H, d)
    k = key.float().repeat_interleave(heads // key.shape[1], dim=1)  # head h reads KV head h // groups
    scores = torch.einsum("bhd,bhld->bhl", q, k) * scaling
    allowed = valid.bool() & (torch.arange(width, device=query.device)[None] <= query_index[:, None])
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    return torch.softmax(scores, dim=-1).mean(1)


@torch.no_grad()
def _probe(
    text_model: nn.Module,
    layer: int,
    hidden: torch.Tensor,
    rotary: tuple[torch.Tensor, torch.Tensor],
    query_index: torch.Tensor,
    inputs: LLMInputs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns layer K-1's (B, L) query-row attention and (B, L, KV * d) fp32 keys from its input."""
    block = text_model.layers[layer - 1]
    query, key = _project(block.self_attn, block.input_layernorm(hidden), rotary)
    attention = _query_row(query, key, block.self_attn.scaling, query_index, inputs.attention_mask)
    return attention, key.transpose(1, 2).reshape(*key.shape[:1], key.shape[2], -1).float()


@torch.no_grad()
def layer_signals(
    text_model: nn.Module, inputs: LLMInputs, layer: int, query_index: torch.Tensor, deepstack_on: bool
) -> LayerSignals:
    """Returns layer K-1's signals for pruning before layer K = ``layer``, running layers 0..K-1 only.

    Args:
        text_model: the decoder (``language_model``).
        inputs: the full (unpruned) prompt contexts, left-padded, no cache.
        layer: K.
        query_index: (B,) slot of each row's last prompt token (FastV's query; spec 1.8).
        deepstack_on: whether the family adds DeepStack features after the first layers.
    """
    _check_layers(text_model, layer)
    rotary, mask, deepstack = _start(text_model, inputs, None, deepstack_on)
    hidden, visual = inputs.embeds, inputs.visual_mask
    for i in range(layer - 1):
        hidden = _run_layer(text_model, i, hidden, mask, rotary, None, visual, deepstack)
    attention, keys = _probe(text_model, layer, hidden, rotary, query_index, inputs)
    hidden = _run_layer(text_model, layer - 1, hidden, mask, rotary, None, visual, deepstack)
    return LayerSignals(attention, keys, text_model.norm(hidden).float())
