"""A checkpoint's sizes, counted exactly: its published ``config.json`` built as the HF class on the meta device.

Nothing is downloaded or allocated: ``published_config`` gives the file the project keeps, the family record names
the transformers class (``FAMILIES``), and ``torch.device("meta")`` builds every parameter as a shape. The split
between the language model and the vision tower is the one training uses (``sparsectx.model_parts.VISION_MARKERS``: what
``freeze_all_but_language_model`` freezes), and LoRA's size is counted from the very linear layers
``apply_lora`` adapts (``adapted_modules``' rule: the named projections of each decoder layer's mixers).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
import transformers
from torch import nn

from sparsectx.model_parts import MIXERS, VISION_MARKERS
from sparsectx.models import resolve_model_path
from sparsectx.models.families import FAMILIES
from sparsectx.models.published import published_config


@dataclass(frozen=True)
class Architecture:
    """What the memory and time models read of one checkpoint (counts are exact, dimensions from its config)."""

    name: str
    """The hub id whose published config.json was built."""
    total: int
    """Every parameter (a tied embedding once)."""
    vision: int
    """Vision tower and merger (``VISION_MARKERS``): frozen unless ``method.train_vision``."""
    embed: int
    """The language model's input embedding."""
    head: int
    """The LM head's own parameters (0 when tied to the embedding)."""
    projections: Mapping[str, tuple[int, int]]
    """Projection name -> (summed in+out features, summed in*out) over the decoder layers that hold it: LoRA of
    rank r on it adds r * (in+out) parameters, a merged twin holds in*out weights."""
    hidden: int
    intermediate: int
    vocab: int
    layers: int
    attention_layers: int
    """Decoder layers with softmax attention (a per-token KV cache); the rest are linear attention."""
    heads: int
    kv_heads: int
    head_dim: int
    q_width: int
    """The query projection's output width (doubled by an output gate, as Qwen3.5's)."""
    qk_norm: bool
    """Per-head RMSNorm on queries and keys (Qwen3-family layers)."""
    linear_state_bytes: int
    """One sequence's fixed linear-attention state over all such layers (convolution window bf16, fp32 recurrent)."""
    linear_width: int
    """A linear-attention layer's mixer width (convolution channels + gate) per token."""
    norms_per_layer: int
    """RMSNorms on a decoder layer's residual path (2; GLM-4's sandwich layout has 4)."""
    vision_width: int
    """The vision blocks' width."""
    vision_block_width: int
    """Summed output features of one vision block's linear layers (its activations per patch)."""
    vision_blocks: int
    patches_per_token: int
    """Vision patches per merged visual token (spatial merge squared)."""
    pixels_per_patch: int
    """Input values of one patch (channels x temporal patch x patch side squared)."""

    @property
    def language(self) -> int:
        """Returns the language model's parameters (everything but the vision tower), LM head included."""
        return self.total - self.vision

    def lora(self, rank: int, targets: list[str]) -> int:
        """Returns the LoRA parameters of rank ``rank`` on ``targets`` (2 per module: A and B)."""
        return rank * sum(self.projections[t][0] for t in targets if t in self.projections)

    def adapted(self, targets: list[str]) -> int:
        """Returns the weights of the ``targets`` projections (what a merged twin holds of its own)."""
        return sum(self.projections[t][1] for t in targets if t in self.projections)

    def kv_bytes_per_token(self) -> int:
        """Returns the bf16 KV cache bytes one token holds over the attention layers."""
        return self.attention_layers * 2 * self.kv_heads * self.head_dim * 2


@lru_cache(maxsize=32)
def _built(hub_id: str, replaced: tuple[tuple[str, Any], ...]) -> Architecture:
    if hub_id.startswith("package:"):  # a checkpoint the package ships (the tiny models): its own config.json
        config = json.loads((Path(resolve_model_path(hub_id)) / "config.json").read_text())
    else:
        config = published_config(hub_id)
    for key, value in replaced:  # a measured run's own architecture (a bench script's dimensions)
        section, _, name = key.rpartition(".")
        (config.setdefault(section, {}) if section else config)[name] = value
    return architecture_of(config, hub_id)


def architecture(hub_id: str, replaced: Mapping[str, Any] | None = None) -> Architecture:
    """Returns the sizes of checkpoint ``hub_id`` (its published config.json; cached per process).

    Args:
        hub_id: ``model.path`` of a model preset, e.g. ``Qwen/Qwen2.5-VL-7B-Instruct``.
        replaced: dotted config keys (``text_config.intermediate_size``) set before building, for a measured
            run whose architecture differs from the published file.
    """
    return _built(hub_id, tuple(sorted((replaced or {}).items())))


def architecture_of(config: dict[str, Any], name: str) -> Architecture:
    """Returns the sizes of the model a ``config.json`` mapping describes, built on the meta device with the class
    its family record serves (an architecture no family serves is refused there, by name)."""
    FAMILIES.for_config(config, name)
    cls = getattr(transformers, config["architectures"][0])
    hf_config = cls.config_class(**{k: v for k, v in config.items() if k not in ("architectures", "model_type")})
    with torch.device("meta"):
        model = cls(hf_config)
    return _measure(name, model, hf_config)


def _measure(hub_id: str, model: nn.Module, config: Any) -> Architecture:
    named = dict(model.named_parameters())
    vision = sum(p.numel() for n, p in named.items() if any(m in f".{n}" for m in VISION_MARKERS))
    language = model.model.language_model
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is language.embed_tokens.weight
    text = config.get_text_config()
    layer_types = list(getattr(text, "layer_types", None) or ["full_attention"] * text.num_hidden_layers)
    attention_layers = sum(t != "linear_attention" for t in layer_types)
    first_attention = language.layers[layer_types.index(next(t for t in layer_types if t != "linear_attention"))]
    attn = first_attention.self_attn
    linear_bytes, linear_width = _linear_state(language, layer_types)
    blocks = _vision_blocks(model)
    vision_cfg = config.vision_config
    width = getattr(vision_cfg, "hidden_size", 0)
    merge = getattr(vision_cfg, "spatial_merge_size", 1)
    return Architecture(
        name=hub_id,
        total=sum(p.numel() for p in named.values()),
        vision=vision,
        embed=language.embed_tokens.weight.numel(),
        head=0 if tied or head is None else head.weight.numel(),
        projections=_projections(language),
        hidden=text.hidden_size,
        intermediate=text.intermediate_size,
        vocab=text.vocab_size,
        layers=text.num_hidden_layers,
        attention_layers=attention_layers,
        heads=text.num_attention_heads,
        kv_heads=text.num_key_value_heads,
        head_dim=attn.head_dim,
        q_width=attn.q_proj.out_features,
        qk_norm=hasattr(attn, "q_norm"),
        linear_state_bytes=linear_bytes,
        linear_width=linear_width,
        norms_per_layer=sum(isinstance(m, nn.Module) and "norm" in n for n, m in first_attention.named_children()),
        vision_width=width,
        vision_block_width=sum(m.out_features for m in blocks[0].modules() if isinstance(m, nn.Linear)),
        vision_blocks=len(blocks),
        patches_per_token=merge * merge,
        pixels_per_patch=getattr(vision_cfg, "num_channels", getattr(vision_cfg, "in_channels", 3))
        * getattr(vision_cfg, "temporal_patch_size", 1)
        * vision_cfg.patch_size**2,
    )


def _projections(language: nn.Module) -> dict[str, tuple[int, int]]:
    """Returns projection name -> (summed in+out, summed in*out) over every decoder layer's mixers."""
    sums: dict[str, tuple[int, int]] = {}
    for layer in language.layers:
        for mixer in MIXERS:
            for name, module in getattr(layer, mixer, nn.Module()).named_children():
                if isinstance(module, nn.Linear):
                    edges, weights = sums.get(name, (0, 0))
                    sums[name] = (edges + module.in_features + module.out_features, weights + module.weight.numel())
    return sums


def _linear_state(language: nn.Module, layer_types: list[str]) -> tuple[int, int]:
    """Returns (bytes of one sequence's linear-attention state over all such layers, one layer's mixer width)."""
    linear = [
        layer.linear_attn
        for layer, kind in zip(language.layers, layer_types, strict=True)
        if kind == "linear_attention"
    ]
    if not linear:
        return 0, 0
    mixer = linear[0]
    conv = mixer.conv1d.weight.shape[0] * (mixer.conv1d.weight.shape[-1] - 1) * 2  # last K-1 inputs, bf16
    recurrent = mixer.num_v_heads * mixer.head_k_dim * mixer.head_v_dim * 4  # fp32, as HF keeps it
    width = sum(m.out_features for m in mixer.modules() if isinstance(m, nn.Linear))
    return len(linear) * (conv + recurrent), width


def _vision_blocks(model: nn.Module) -> nn.ModuleList:
    """Returns the vision tower's block list (its longest ``ModuleList`` under a vision marker)."""
    lists = [
        m
        for n, m in model.named_modules()
        if isinstance(m, nn.ModuleList) and any(k in f".{n}." for k in VISION_MARKERS)
    ]
    return max(lists, key=len)
