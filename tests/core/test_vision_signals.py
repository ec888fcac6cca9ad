"""Pruner signals (recomputed from sdpa blocks, or in-pass from grouped ones) equal an eager run's attention weights."""

from __future__ import annotations

import copy
import importlib

import pytest
import torch
from tiny_models import noise_image

from sparsectx.encoding import encode_samples
from sparsectx.models import adapter_for, set_vision_attention
from sparsectx.prompting import PromptItem
from sparsectx.visual import ImageTokens


def _eager_received(tiny_vlm, items, monkeypatch) -> torch.Tensor:
    """Attention received per merged token (raster order) from an eager run's recorded weights."""
    module = importlib.import_module(type(tiny_vlm.adapter.model).__module__)
    recorded: list[torch.Tensor] = []
    original = module.eager_attention_forward

    def recording(*args, **kwargs):
        out, weights = original(*args, **kwargs)
        recorded.append(weights.detach())
        return out, weights

    monkeypatch.setattr(module, "eager_attention_forward", recording)
    visual = tiny_vlm.adapter.visual
    monkeypatch.setattr(visual.config, "_attn_implementation", "eager")
    samples = encode_samples(tiny_vlm.adapter, tiny_vlm.processor, items)
    images = [im for s in samples for im in s.images]
    last = recorded[-len(images) :]  # the signal block is the last block: one call per image segment
    per_patch = torch.cat([w[0].mean(0).sum(0) for w in last])
    unit = tiny_vlm.adapter.merge_unit
    merged = per_patch.reshape(-1, unit).mean(1)
    grids = torch.tensor([[1, im.grid[1] * 2, im.grid[2] * 2] for im in images])
    to_raster = tiny_vlm.adapter.layout.to_raster(visual, grids)
    return merged if to_raster is None else merged[to_raster]


def _adapter(tiny_vlm, vision_attention: str):
    """The fixture's adapter (HF sdpa tower), or one over a copy routed as ``model.vision_attention`` says."""
    if vision_attention == "hf":
        return tiny_vlm.adapter
    model = copy.deepcopy(tiny_vlm.adapter.model)
    set_vision_attention(model, vision_attention)
    return adapter_for(model, signal_chunk=tiny_vlm.adapter.signal_chunk)


@pytest.mark.parametrize("vision_attention", ["hf", "grouped"])
@torch.no_grad()
def test_attention_received_matches_eager_weights(tiny_vlm, monkeypatch, vision_attention):
    patch = tiny_vlm.patch
    images = [noise_image(patch * 8, patch * 4, 7), noise_image(patch * 4, patch * 6, 8)]
    items = [PromptItem("a", images, "q?", "s", "")]
    samples = encode_samples(_adapter(tiny_vlm, vision_attention), tiny_vlm.processor, items)
    ours = torch.cat([im.attention_received for im in samples[0].images])
    reference = _eager_received(tiny_vlm, items, monkeypatch)
    torch.testing.assert_close(ours, reference.float(), atol=1e-5, rtol=1e-5)
    for image in samples[0].images:
        # each patch query spreads mass 1 over the image: 4N in total, N after the per-unit mean
        assert image.attention_received.sum().item() == pytest.approx(image.num_tokens, rel=1e-4)


@torch.no_grad()
def test_signals_shapes(tiny_vlm):
    patch = tiny_vlm.patch
    samples = encode_samples(
        tiny_vlm.adapter, tiny_vlm.processor, [PromptItem("a", [noise_image(patch * 6, patch * 4, 1)], "q", "s", "")]
    )
    image: ImageTokens = samples[0].images[0]
    assert image.grid == (1, 2, 3)
    assert image.embeds.shape[0] == image.attention_received.shape[0] == image.keys.shape[0] == 6
    assert len(image.deepstack) == (2 if tiny_vlm.family == "qwen3_vl" else 0)
