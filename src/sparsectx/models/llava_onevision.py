"""LLaVA-OneVision (``llava_onevision``): SigLIP views, a 2-layer projector, packed tiles, 1-D positions.

One ``ImageTokens`` per image holds every token of the image's ``<image>`` run in HF's packed order: the
base view's P patches first, then the tile mosaic row by row (unpadded, downscaled past anyres_max_m)
with a newline token closing each row (a base-only image: its P patches and one newline). The budget is
per image over that whole run: k = clamp(round(b * N), 1, N) with N counting base view, tiles and
newlines, and the pruner alone decides how k splits over them (``model.tile_budget: pooled``, the one
split implemented). The pruner signals come from the SigLIP layer whose output the projector reads
(``vision_feature_layer``), recomputed per view from that layer's captured input (SigLIP has no grouped
attention); attention received within each view (so every view's total is its P queries) and head-mean
keys are packed exactly as the features. Newline tokens never pass the tower: attention 0, keys 0.
``grid`` is (1, 1, N): the packed run has no single 2-D grid, so grid-neighbour rules see a sequence.

The language model (Qwen2) takes 1-D positions: row 0 of the three equal rows every context carries.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
    LlavaOnevisionImageProcessorPil,
)

from sparsectx.models.adapter import LLMInputs
from sparsectx.models.family import FamilySpec, tiny_decoder
from sparsectx.models.in_llm import LayerSignals, layer_signals, run_with_drop
from sparsectx.models.positions import flat_positions
from sparsectx.models.video_input import video_refusal
from sparsectx.models.vision_signals import attention_received, merger_sensitivity
from sparsectx.visual import ImageTokens, VisionSignals


@contextmanager
def captured_inputs(attns: Sequence[nn.Module]) -> Iterator[list[list[torch.Tensor]]]:
    """Yields per module of ``attns`` a list that receives its (views, P, C) input on every call."""
    captured: list[list[torch.Tensor]] = [[] for _ in attns]

    def hook(store: list[torch.Tensor]):  # noqa: ANN202
        def record(_module: nn.Module, args: tuple, kwargs: dict) -> None:
            store.append((args[0] if args else kwargs["hidden_states"]).detach())

        return record

    with ExitStack() as stack:
        for attn, store in zip(attns, captured, strict=True):
            stack.callback(attn.register_forward_pre_hook(hook(store), with_kwargs=True).remove)
        yield captured


@torch.no_grad()
def siglip_signals(attn: nn.Module, hidden: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (views, P) fp32 attention received within each view and (views, P, d) head-mean keys.

    Args:
        attn: a SigLIP attention module (no rotary: q and k are its projections).
        hidden: (views, P, C) its input.
        chunk: query rows whose softmax is held at once.
    """
    views, patches, _ = hidden.shape
    shape = (views * patches, attn.num_heads, attn.head_dim)
    q = attn.q_proj(hidden).reshape(shape).transpose(0, 1).float()
    k = attn.k_proj(hidden).reshape(shape).transpose(0, 1).float()
    bounds = torch.arange(views + 1, device=hidden.device) * patches
    received = attention_received(q, k, bounds, attn.scale, chunk)
    return received.view(views, patches), k.mean(0).view(views, patches, -1)


class LlavaOnevisionAdapter:
    """``VLMAdapter`` for HF ``LlavaOnevisionForConditionalGeneration``."""

    family = "llava_onevision"

    def __init__(self, model: PreTrainedModel, signal_chunk: int) -> None:
        config = model.config
        if config.vision_feature_select_strategy != "full" or not isinstance(config.vision_feature_layer, int):
            raise ValueError(
                "the llava_onevision adapter supports vision_feature_select_strategy='full' with one integer "
                f"vision_feature_layer (the OneVision checkpoints); got {config.vision_feature_select_strategy!r}"
                f" and {config.vision_feature_layer!r}"
            )
        self.model = model
        self.signal_chunk = signal_chunk
        self.image_token_id = int(config.image_token_id)
        self.video_token_id = int(config.video_token_id)
        self.vision_calls = 0
        self.vision_signals = VisionSignals()
        """The extra signals ``encode_images`` records: what the job's pruner declared."""

    @property
    def language_model(self) -> nn.Module:
        """Returns the decoder-only text model."""
        return self.model.model.language_model

    def _layers(self) -> nn.ModuleList:
        return self.model.model.vision_tower.encoder.layers

    def _signal_attns(self) -> list[nn.Module]:
        """Returns the signal layer's attention (the layer the projector reads), then the object layer's."""
        layers, feature = self._layers(), self.model.config.vision_feature_layer
        signal = layers[feature if feature < 0 else feature - 1].self_attn
        attns = [signal]
        if self.vision_signals.object_attention:
            attns.append(layers[len(layers) // 2 - 1].self_attn)  # the depth // 2 - 1 rule of the Qwen towers
        return attns

    def _pack(
        self, per_view: torch.Tensor, views: list[int], sizes: torch.Tensor, fill: torch.Tensor
    ) -> list[torch.Tensor]:
        """Returns per image the packed (N_i, C) rows of (sum views, P, C) per-view rows, ``fill`` at newlines."""
        parts = list(torch.split(per_view, views))
        packed, _ = self.model.model.pack_image_features(
            parts, sizes, image_newline=fill, vision_aspect_ratio=self.model.config.vision_aspect_ratio
        )
        return packed

    def encode_images(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> list[ImageTokens]:
        """Returns one ``ImageTokens`` per image; the SigLIP tower runs once over every view of the batch.

        ``grid_thw`` holds the processor's per-image layouts (views, height, width)
        (``sparsectx.models.llava_onevision_processor``); ``pixel_values`` is (n, V_max, 3, S, S).
        """
        inner, config = self.model.model, self.model.config
        views = grid_thw[:, 0].tolist()
        sizes = grid_thw[:, 1:]
        pixels = torch.cat([pix[:count] for pix, count in zip(pixel_values, views, strict=True)])
        attns = self._signal_attns()
        with captured_inputs(attns) as captured:
            out = inner.vision_tower(pixels.to(self.model.dtype), output_hidden_states=True, return_dict=True)
        self.vision_calls += 1
        selected = out.hidden_states[config.vision_feature_layer]
        embeds = self._pack(inner.multi_modal_projector(selected), views, sizes, inner.image_newline)
        zero = lambda width: selected.new_zeros(width, dtype=torch.float32)  # noqa: E731
        received, keys = siglip_signals(attns[0], captured[0][-1], self.signal_chunk)
        received = self._pack(received[..., None], views, sizes, zero(1))
        keys = self._pack(keys, views, sizes, zero(keys.shape[-1]))
        extra: dict[str, list[torch.Tensor]] = {}
        if self.vision_signals.object_attention:
            objects, _ = siglip_signals(attns[1], captured[1][-1], self.signal_chunk)
            extra["object_attention"] = [o[:, 0] for o in self._pack(objects[..., None], views, sizes, zero(1))]
        probe = self.vision_signals.merger_probe
        if probe is not None:
            flat = selected.reshape(-1, selected.shape[-1])
            sensitivity = merger_sensitivity(inner.multi_modal_projector, flat, 1, probe, self.signal_chunk)
            shaped = sensitivity.view(*selected.shape[:2], 1)
            extra["merger_sensitivity"] = [s[:, 0] for s in self._pack(shaped, views, sizes, zero(1))]
        return [
            ImageTokens(
                embeds=embeds[i],
                grid=(1, 1, embeds[i].shape[0]),
                attention_received=received[i][:, 0],
                keys=keys[i],
                **{name: parts[i] for name, parts in extra.items()},
            )
            for i in range(len(views))
        ]

    def encode_videos(
        self, _pixel_values: torch.Tensor, _grid_thw: torch.Tensor, _second_per_grid: torch.Tensor | None
    ) -> list[ImageTokens]:
        """Raises the config error of a family without a video path (its videos are pooled frame tiles)."""
        raise video_refusal("llava_onevision", "videos")

    def prompt_positions(self, ids: torch.Tensor, images: list[ImageTokens]) -> tuple[torch.Tensor, int]:
        """Returns the prompt's 1-D positions 0..L-1 (in all three rows) and L: images take one per token."""
        del images
        return flat_positions(ids)

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Returns the LLM input embeddings of ``ids``."""
        return self.language_model.embed_tokens(ids)

    def _flat(self, inputs: LLMInputs) -> LLMInputs:
        """Returns ``inputs`` with the (B, L) 1-D positions of row 0 (contexts and the engine carry 3 rows)."""
        return replace(inputs, positions=inputs.positions[0])

    def run_llm(self, inputs: LLMInputs, cache: object | None) -> torch.Tensor:
        """Returns (B, L, D) final-norm hidden states of the Qwen2 text model (1-D positions: row 0)."""
        flat = self._flat(inputs)
        if flat.late is not None:
            return run_with_drop(self.language_model, flat, cache, False)
        out = self.language_model(
            inputs_embeds=flat.embeds,
            attention_mask=flat.attention_mask,
            position_ids=flat.positions,
            past_key_values=cache,
            use_cache=cache is not None,
        )
        return out.last_hidden_state

    def llm_signals(self, inputs: LLMInputs, layer: int, query_index: torch.Tensor) -> LayerSignals:
        """Returns layer ``layer`` - 1's pruner signals on full prompt contexts (``in_llm.layer_signals``)."""
        return layer_signals(self.language_model, self._flat(inputs), layer, query_index, False)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Returns logits of ``hidden`` through the LM head."""
        return self.model.lm_head(hidden)


SPECIAL_TOKENS = {
    151643: "<|endoftext|>",
    151644: "<|im_start|>",
    151645: "<|im_end|>",
    151646: "<image>",
    151647: "<video>",
}
"""The llava-hf Qwen2 tokenizer's special tokens: Qwen2's three, then ``<image>`` and ``<video>`` as config.json's
``image_token_index`` / ``video_token_index`` declare them."""


def _tiny_config(published: dict[str, Any]) -> dict[str, Any]:
    """Returns LLaVA-OneVision's tiny config.json: a 2-layer Qwen2 decoder of width 64 (4 heads, 2 KV heads), a
    2-layer SigLIP of width 32. The view geometry (``image_size``, ``patch_size``), ``image_grid_pinpoints``,
    ``vision_aspect_ratio``, ``vision_feature_layer`` and ``vision_feature_select_strategy`` stay as published."""
    config = copy.deepcopy(published)
    tiny_decoder(config["text_config"], heads=4, kv_heads=2)
    config["vision_config"].update(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    return config


SPEC = FamilySpec(
    name="llava_onevision",
    model_types=("llava_onevision",),
    architectures=("LlavaOnevisionForConditionalGeneration",),
    adapter=LlavaOnevisionAdapter,
    special_tokens=SPECIAL_TOKENS,
    tiny_config=_tiny_config,
    image_processors={"LlavaOnevisionImageProcessor": LlavaOnevisionImageProcessorPil},
    image_marker="<image>",
    video_layout=None,
    thinking_switch=None,
    tiled=True,
    source="llava-hf/llava-onevision-qwen2-7b-ov-hf config.json / preprocessor_config.json (model_type "
    "llava_onevision, LlavaOnevisionImageProcessor, 384 px views, anyres pinpoints); transformers 5.17 "
    "models/llava_onevision",
)
"""LLaVA-OneVision: tiles plus a base view; no pixel cap (``model.max_visual_tokens`` is refused)."""
