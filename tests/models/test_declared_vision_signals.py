"""Pruner-declared vision signals: the object block's attention and the merger sensitivity, recorded in the
one tower pass, equal an eager run's attention weights and a float64 finite-difference recompute."""

from __future__ import annotations

import copy
import dataclasses
import importlib

import pytest
import torch
from tiny_models import char_processor, noise_image, tiny_qwen2_5_vl, tiny_qwen3_vl

from sparsectx.budget import tokens_to_keep
from sparsectx.encoding import encode_samples
from sparsectx.models import adapter_for, set_vision_attention
from sparsectx.prompting import PromptItem
from sparsectx.pruning import declared_signals, select_tokens
from sparsectx.visual import MergerProbe, VisionSignals

# Images of several sizes whose Qwen2.5-VL windows (2x2 merged tokens) reorder the tokens.
SIZES = {
    "qwen2_5_vl": [(84, 140), (112, 56), (56, 56), (140, 84)],
    "qwen3_vl": [(96, 160), (128, 64), (64, 64), (160, 96)],
}
BUILDERS = {"qwen2_5_vl": (tiny_qwen2_5_vl, 14), "qwen3_vl": (tiny_qwen3_vl, 16)}
QKV_GAIN = 10.0  # peaked attention, so a wrong block, segment or order shows (see test_grouped_vision_attention)
PROBE = MergerProbe(probes=3, step=0.05, seed=11)


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def family(request, tmp_path_factory):
    """Returns (family, sdpa model, processor, pixel_values, grid_thw, images)."""
    build, patch = BUILDERS[request.param]
    processor = char_processor(patch, tmp_path_factory.mktemp(request.param))
    model = build(processor.tokenizer, seed=0)
    with torch.no_grad():
        for block in model.model.visual.blocks:
            block.attn.qkv.weight.mul_(QKV_GAIN)
    images = [noise_image(w, h, seed) for seed, (w, h) in enumerate(SIZES[request.param])]
    inputs = processor.image_processor(images=images, return_tensors="pt")
    return request.param, model, processor, inputs["pixel_values"].float(), inputs["image_grid_thw"], images


def _adapter(model, vision_attention, signals):
    model = copy.deepcopy(model)
    if vision_attention == "grouped":
        set_vision_attention(model, "grouped")
    adapter = adapter_for(model, signal_chunk=8)
    adapter.vision_signals = signals
    return adapter


def _raster_order(visual, out):
    """The (M,) block-order row of each raster token, recovered from HF's own outputs: the merger applied to
    the blocks' output (block order) matched row by row against ``pooler_output`` (raster order)."""
    block_rows = visual.merger(out.last_hidden_state)
    return torch.cdist(out.pooler_output, block_rows).argmin(dim=1)


def _eager_reference(model, pixels, grid, monkeypatch):
    """Returns per-block attention received per merged token (raster order) from eager weights, and the outputs."""
    model = copy.deepcopy(model)
    visual = model.model.visual
    module = importlib.import_module(type(model).__module__)
    calls: dict[int, list[torch.Tensor]] = {}
    original = module.eager_attention_forward

    def recording(attn, *args, **kwargs):
        out, weights = original(attn, *args, **kwargs)
        calls.setdefault(id(attn), []).append(weights.detach()[0].mean(0).sum(0))  # per key of one segment
        return out, weights

    monkeypatch.setattr(module, "eager_attention_forward", recording)
    monkeypatch.setattr(visual.config, "_attn_implementation", "eager")
    with torch.no_grad():
        out = visual(pixels, grid_thw=grid)
    monkeypatch.undo()
    order = _raster_order(visual, out)
    per_block = [torch.cat(calls[id(block.attn)]).reshape(-1, 4).mean(1)[order] for block in visual.blocks]
    return per_block, out, order


@pytest.mark.parametrize("vision_attention", ["hf", "grouped"])
@torch.no_grad()
def test_object_and_last_block_attention_match_eager_weights(family, monkeypatch, vision_attention):
    name, model, _, pixels, grid, _ = family
    adapter = _adapter(model, vision_attention, VisionSignals(object_attention=True))
    visual = adapter.visual
    passes = []
    visual.register_forward_hook(lambda *_: passes.append(1))
    images = adapter.encode_images(pixels, grid)
    assert adapter.vision_calls == 1 and len(passes) == 1  # one tower pass records both blocks
    depth = len(visual.blocks)
    object_index = depth // 2 - 1  # the spec's rule: HiPrune's Qwen2.5-VL layer 16 of 32 (1-indexed)
    assert adapter.layout.object_block(visual) is visual.blocks[object_index].attn
    reference, _, order = _eager_reference(model, pixels, grid, monkeypatch)
    got_object = torch.cat([im.object_attention for im in images])
    got_last = torch.cat([im.attention_received for im in images])
    last_index = max(visual.fullatt_block_indexes) if name == "qwen2_5_vl" else depth - 1
    torch.testing.assert_close(got_object, reference[object_index].float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_last, reference[last_index].float(), atol=1e-5, rtol=1e-5)
    assert (reference[object_index] - reference[last_index]).abs().max() > 1e-2  # two different blocks
    if name == "qwen2_5_vl":
        # The tiny tower's object block is windowed: the window order permutation applies to it too.
        assert object_index not in visual.fullatt_block_indexes
        assert not torch.equal(order, torch.arange(order.numel()))
        per_window = reference[object_index][torch.argsort(order)]
        assert (got_object - per_window).abs().max() > 1e-2  # block order is not raster order here


@torch.no_grad()
def test_baseline_signals_are_unchanged_and_extras_absent(family):
    _, model, _, pixels, grid, _ = family
    plain = _adapter(model, "hf", VisionSignals()).encode_images(pixels, grid)
    extra = _adapter(model, "hf", VisionSignals(object_attention=True, merger_probe=PROBE)).encode_images(pixels, grid)
    for a, b in zip(plain, extra, strict=True):
        assert a.object_attention is None and a.merger_sensitivity is None
        for field in ("embeds", "attention_received", "keys"):
            assert torch.equal(getattr(a, field), getattr(b, field))
        assert b.object_attention.shape == b.merger_sensitivity.shape == (b.num_tokens,)


def _float64_sensitivity(visual, out, order, probe):
    """s_i = mean_j ||f(x_i + h u_j) - f(x_i - h u_j)|| / 2h, one token and one direction at a time in float64."""
    merger = copy.deepcopy(visual.merger).double()
    channels = out.last_hidden_state.shape[1]
    x = out.last_hidden_state.double().reshape(-1, 4 * channels)
    gen = torch.Generator().manual_seed(probe.seed)
    u = torch.randn(probe.probes, 4 * channels, generator=gen, dtype=torch.float64)
    u = u / u.norm(dim=1, keepdim=True)
    f = lambda v: merger(v.reshape(4, channels))[0]  # noqa: E731
    s = torch.tensor(
        [
            sum(float((f(x[i] + probe.step * d) - f(x[i] - probe.step * d)).norm()) for d in u)
            / (2 * probe.step * probe.probes)
            for i in range(x.shape[0])
        ],
        dtype=torch.float64,
    )
    return s[order]


@pytest.mark.parametrize("vision_attention", ["hf", "grouped"])
@torch.no_grad()
def test_merger_sensitivity_matches_float64_finite_differences(family, monkeypatch, vision_attention):
    name, model, _, pixels, grid, _ = family
    adapter = _adapter(model, vision_attention, VisionSignals(merger_probe=PROBE))
    images = adapter.encode_images(pixels, grid)
    assert adapter.vision_calls == 1
    _, out, order = _eager_reference(model, pixels, grid, monkeypatch)
    want = _float64_sensitivity(model.model.visual, out, order, PROBE)
    got = torch.cat([im.merger_sensitivity for im in images])
    torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-4)
    assert want.max() > 1.05 * want.min()  # the ranking has something to rank
    if name == "qwen2_5_vl":
        assert (got.double() - want[torch.argsort(order)]).abs().max() > 1e-3  # block order would fail
    other = _adapter(model, vision_attention, VisionSignals(merger_probe=MergerProbe(3, 0.05, seed=12)))
    assert not torch.equal(torch.cat([im.merger_sensitivity for im in other.encode_images(pixels, grid)]), got)


@pytest.mark.parametrize("pruner, params", [("hiprune", {"alpha": 1.0}), ("zoo_prune", {"probes": 4, "step": 0.01})])
@torch.no_grad()
def test_declared_pruners_run_on_encoded_samples(family, pruner, params):
    """encode_samples (the eval/training/Pass@K/efficiency path) with the pruner's declaration: one tower
    pass for the batch, then exactly k tokens per image at every budget; undeclared, the pruner says why."""
    _, model, processor, _, _, images = family
    items = [
        PromptItem("a", images[:2], "q?", "s", ""),
        PromptItem("b", images[2:], "other question", "s", ""),
    ]
    adapter = _adapter(model, "hf", declared_signals(pruner, params, seed=0))
    samples = encode_samples(adapter, processor, items)
    assert adapter.vision_calls == 1
    for sample in samples:
        for image in sample.images:
            for budget in (0.05, 0.1, 0.2, 0.5, 1.0):
                gen = torch.Generator().manual_seed(0)
                picked = select_tokens(pruner, image, sample.question_embeds, budget, gen, params)
                assert picked.indices.numel() == tokens_to_keep(budget, image.num_tokens)
    bare = encode_samples(_adapter(model, "hf", VisionSignals()), processor, items[:1])
    with pytest.raises(ValueError, match=rf"declared_signals\('{pruner}'"):
        select_tokens(pruner, bare[0].images[0], bare[0].question_embeds, 0.5, torch.Generator(), params)


@pytest.mark.parametrize("vision_attention", ["hf", "grouped"])
@torch.no_grad()
def test_an_object_block_equal_to_the_last_block_is_recorded_once(family, vision_attention):
    """A tower whose object block is its last full-attention block (possible in tiny towers) shares one record."""
    _, model, _, pixels, grid, _ = family
    adapter = _adapter(model, vision_attention, VisionSignals(object_attention=True))
    adapter.layout = dataclasses.replace(adapter.layout, object_block=adapter.layout.signal_block)
    for image in adapter.encode_images(pixels, grid):
        assert torch.equal(image.object_attention, image.attention_received)
