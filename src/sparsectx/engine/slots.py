"""The static KV cache of the decode engine: B slots x S positions per layer, written at a per-slot index.

A slot holds one sequence at a time: its (left-padded) prompt from a prefill at positions ``[0, W)``, then
one generated token per decode step at ``write_index``. ``valid`` marks, per layer, the key positions a slot
attends to (padding and stale rows of a previous occupant are False; after in-LLM pruning, layers >= K hold
only the kept tokens, so their prefill rows are fewer than those of layers < K and the rest of
``[0, write_index)`` is False there), so slots of different lengths, refilled at
different times, share one fixed-shape decode step that a CUDA graph can replay. The HF decoder layers
call ``update`` like any transformers cache; during a decode step the text model's attention is switched
to ``slot_attention``, which attends each slot's single query to its valid keys with grouped KV heads and
no copy of the cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface, DynamicCache, PretrainedConfig

ATTENTION = "sparsectx_slot_decode"


def slot_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor,
    scaling: float | None = None,
    **_: object,
) -> tuple[torch.Tensor, None]:
    """Returns (B, 1, H, d) attention of one query per slot over its valid cached keys, and no weights.

    Args:
        query: (B, H, 1, d) rotated queries.
        key, value: (B, KV, S, d) the whole slot cache of this layer (H a multiple of KV).
        attention_mask: (B, 1, 1, S) bool, True at keys the slot attends to; or (B, layers, 1, S), one mask
            per decoder layer, of which ``module.layer_idx``'s row is used.
        scaling: softmax scale (d ** -0.5 when None).
    """
    batch, heads, _, dim = query.shape
    if attention_mask.shape[1] > 1:
        attention_mask = attention_mask[:, module.layer_idx, None]
    groups = heads // key.shape[1]
    scale = dim**-0.5 if scaling is None else scaling
    q = query.reshape(batch, key.shape[1], groups, dim)  # head h reads KV head h // groups
    scores = torch.matmul(q, key.transpose(-1, -2)).float() * scale  # (B, KV, G, S)
    scores = scores.masked_fill(~attention_mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    out = torch.matmul(probs, value)  # (B, KV, G, d)
    return out.reshape(batch, 1, heads, dim), None


AttentionInterface.register(ATTENTION, slot_attention)


@contextmanager
def decode_attention(text_config: PretrainedConfig) -> Iterator[None]:
    """Routes the text model's attention through ``slot_attention`` inside the context (then restores it)."""
    previous = text_config._attn_implementation_internal
    text_config._attn_implementation_internal = ATTENTION
    try:
        yield
    finally:
        text_config._attn_implementation_internal = previous


class SlotCache:
    """Per-layer (B, KV, S, d) key/value buffers, the per-slot write index, (B, layers, S) valid-key masks."""

    def __init__(self, prefill: DynamicCache, slots: int, length: int) -> None:
        """Allocates ``slots`` x ``length`` rows shaped like the layers of a prefill cache."""
        self.keys: list[torch.Tensor | None] = []
        self.values: list[torch.Tensor | None] = []
        for layer in prefill.layers:
            keys, values = self.kv_buffers(layer, slots, length)
            self.keys.append(keys)
            self.values.append(values)
        device = next(keys for keys in self.keys if keys is not None).device
        self.slots, self.length = slots, length
        self.write_index = torch.zeros(slots, dtype=torch.long, device=device)
        self._rows = torch.arange(slots, device=device)
        self.valid = torch.zeros(slots, len(self.keys), length, dtype=torch.bool, device=device)
        self.clear()

    def kv_buffers(self, layer: object, slots: int, length: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Returns zeroed (slots, KV, length, d) key and value buffers shaped like prefill cache layer ``layer``.

        A family whose layers keep no keys (linear attention, ``sparsectx.engine.hybrid_slots``) returns
        (None, None) for those layers; ``load`` then copies nothing into them.
        """
        _, kv_heads, _, dim = layer.keys.shape
        shape = (slots, kv_heads, length, dim)
        return layer.keys.new_zeros(shape), layer.values.new_zeros(shape)

    def clear(self) -> None:
        """Empties every slot: writes start at 0, and each slot attends to one (zero) key only.

        That one key keeps an empty slot's logits finite (never NaN) while it decodes unused.
        """
        self.write_index.zero_()
        self.valid.zero_()
        self.valid[:, :, 0] = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *_: object, **__: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Writes one step's (B, KV, 1, d) keys/values at each slot's write index; returns the whole layer."""
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        # An index_put (not a scatter): a compiled step then writes the cache in place, without a copy.
        keys[self._rows, :, self.write_index] = key_states[:, :, 0].to(keys.dtype)
        values[self._rows, :, self.write_index] = value_states[:, :, 0].to(values.dtype)
        return keys, values

    def mark_written(self) -> None:
        """Marks each slot's write position as a valid key (called before the step's layers run)."""
        index = self.write_index.view(-1, 1, 1).expand(-1, self.valid.shape[1], 1)
        self.valid.scatter_(2, index, True)

    def attention_mask(self) -> torch.Tensor:
        """Returns the (B, layers, 1, S) bool valid-key masks that ``slot_attention`` reads per layer."""
        return self.valid[:, :, None, :]

    def load(
        self,
        slots: list[int],
        prefill: DynamicCache,
        masks: list[torch.Tensor],
        source: torch.Tensor | None = None,
    ) -> None:
        """Places a prefill's rows into ``slots``: layer l's keys/values at ``[0, W_l)``, valid at masks[l].

        ``masks`` holds per decoder layer the (B_new, W_l) mask of the keys that layer cached (W_l < W after
        in-LLM pruning for layers >= K; ``sparsectx.models.in_llm.layer_masks``). ``source`` (len(slots),)
        int64 picks the prefill row of each slot (several slots may share one row); None = row i for slot i.
        The next decode step of each slot writes at W = the widest layer's width in every layer.
        """
        width = max(mask.shape[1] for mask in masks)
        if width >= self.length:
            raise ValueError(f"a prompt of {width} tokens does not fit a cache of {self.length} positions")
        rows = torch.tensor(slots, dtype=torch.long, device=self.write_index.device)
        pick = (lambda t: t) if source is None else (lambda t: t.index_select(0, source))  # noqa: E731
        self.valid[rows] = False
        layers = zip(prefill.layers, self.keys, self.values, masks, strict=True)
        for index, (layer, keys, values, mask) in enumerate(layers):
            own = mask.shape[1]
            if keys is None:
                continue
            keys[rows, :, :own] = pick(layer.keys).to(keys.dtype)
            values[rows, :, :own] = pick(layer.values).to(values.dtype)
            self.valid[rows, index, :own] = pick(mask).bool()
        self.write_index[rows] = width
