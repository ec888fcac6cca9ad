"""The slot cache of a hybrid decoder (Qwen3.5): KV slots for full attention, state slots for linear attention.

A linear-attention layer (gated delta rule after a causal depthwise convolution) keeps no keys: it carries a
(B, C, K) window of its last K convolution inputs and a (B, H, d_k, d_v) recurrent state. ``HybridSlotCache``
holds both per slot beside ``SlotCache``'s per-layer KV buffers of the full-attention layers. A prefill's
states are copied into a slot's rows; each decode step HF's layer updates them in place (the convolution
window through ``causal_conv1d_update``'s ``copy_``, the recurrent state through ``update_recurrent_state``),
so the step keeps fixed buffers for ``torch.compile`` and CUDA-graph capture. A slot's state is the state of
its own left-padded prompt: padding rows enter a linear layer as zeros (HF's padding mask), which leave a
zero recurrent state and a zero convolution input, as the start of an unpadded sequence does.

The engine picks this cache by the prefill cache's layer types (``slot_cache_for``); the decode step, the
attention routing and the refill logic are the one engine's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache
from transformers.cache_utils import LinearAttentionCacheLayerMixin

from sparsectx.engine.slots import SlotCache


@dataclass
class SlotStates:
    """One linear-attention layer's per-slot states, under the attribute names HF's layer reads.

    Attributes:
        conv_states: {0: (B, C, K)} the last K convolution inputs of each slot.
        recurrent_states: {0: (B, H, d_k, d_v)} each slot's gated-delta-rule state (fp32 as HF keeps it).
        record_past: always False: one decode token per step, the window is kept at K.
    """

    conv_states: dict[int, torch.Tensor]
    recurrent_states: dict[int, torch.Tensor]
    record_past: bool = field(default=False)


def is_hybrid(prefill: DynamicCache) -> bool:
    """Returns whether a prefill cache has linear-attention layers (a hybrid decoder's cache)."""
    return any(isinstance(layer, LinearAttentionCacheLayerMixin) for layer in prefill.layers)


class HybridSlotCache(SlotCache):
    """``SlotCache`` plus each linear-attention layer's convolution window and recurrent state per slot.

    ``layers[l]`` is a ``SlotStates`` for linear layer l (None for a full-attention layer, whose keys and
    values are ``keys[l]``/``values[l]``); HF's linear layers read it through ``has_previous_state``,
    ``layers[l]`` and ``update_recurrent_state`` as they read a transformers cache.
    """

    def __init__(self, prefill: DynamicCache, slots: int, length: int) -> None:
        """Allocates KV slots for the full layers and state slots for the linear layers of ``prefill``."""
        self.layers: list[SlotStates | None] = []
        for layer in prefill.layers:
            if not isinstance(layer, LinearAttentionCacheLayerMixin):
                self.layers.append(None)
                continue
            if layer.number_of_states != 1:
                raise ValueError(
                    f"this decoder's linear layers keep {layer.number_of_states} states each; the slot cache "
                    "holds one (Qwen3.5's layout): model families with more are not supported"
                )
            conv, recurrent = layer.conv_states[0], layer.recurrent_states[0]
            self.layers.append(
                SlotStates(
                    {0: conv.new_zeros(slots, *conv.shape[1:])},
                    {0: recurrent.new_zeros(slots, *recurrent.shape[1:])},
                )
            )
        super().__init__(prefill, slots, length)

    def kv_buffers(self, layer: object, slots: int, length: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Returns ``SlotCache``'s KV buffers for a full-attention layer, (None, None) for a linear one."""
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            return None, None
        return super().kv_buffers(layer, slots, length)

    def clear(self) -> None:
        """Empties every slot: ``SlotCache.clear`` plus zero states (an empty slot decodes finite logits)."""
        super().clear()
        for states in self.layers:
            if states is not None:
                states.conv_states[0].zero_()
                states.recurrent_states[0].zero_()

    def has_previous_state(self, layer_idx: int | None = None, state_idx: int | None = None) -> bool:
        """Returns True: during a decode step every slot's linear layers continue from a loaded state."""
        return True

    def update_recurrent_state(
        self, recurrent_states: torch.Tensor, layer_idx: int, state_idx: int = 0, **_: object
    ) -> torch.Tensor:
        """Writes one step's (B, H, d_k, d_v) recurrent states in place; returns the layer's state buffer."""
        buffer = self.layers[layer_idx].recurrent_states[state_idx]
        buffer.copy_(recurrent_states)
        return buffer

    def load(
        self,
        slots: list[int],
        prefill: DynamicCache,
        masks: list[torch.Tensor],
        source: torch.Tensor | None = None,
    ) -> None:
        """Places a prefill's rows into ``slots`` (``SlotCache.load``) and its linear layers' states too."""
        super().load(slots, prefill, masks, source)
        rows = torch.tensor(slots, dtype=torch.long, device=self.write_index.device)
        pick = (lambda t: t) if source is None else (lambda t: t.index_select(0, source))  # noqa: E731
        for states, layer in zip(self.layers, prefill.layers, strict=True):
            if states is None:
                continue
            for own, theirs in (
                (states.conv_states, layer.conv_states),
                (states.recurrent_states, layer.recurrent_states),
            ):
                own[0][rows] = pick(theirs[0]).to(own[0].dtype)


def slot_cache_for(prefill: DynamicCache, slots: int, length: int) -> SlotCache:
    """Returns the engine's slot cache for a prefill cache: hybrid when it has linear-attention layers."""
    kind = HybridSlotCache if is_hybrid(prefill) else SlotCache
    return kind(prefill, slots, length)
