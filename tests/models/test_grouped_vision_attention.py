"""The grouped vision attention equals HF's per-segment sdpa loop, and its in-pass pruner signals the recompute."""

from __future__ import annotations

import copy
import dataclasses
import shutil
from pathlib import Path

import pytest
import torch
from tiny_models import char_processor, noise_image, tiny_qwen2_5_vl, tiny_qwen3_vl
from transformers.vision_utils import get_vision_window_index

from sparsectx.eval.checkpoints import load_eval_model
from sparsectx.models import ModelConfig, adapter_for, load_model, set_vision_attention
from sparsectx.models import vision_attention as va
from sparsectx.models.vision_signals import capture_attention_input, merge_signals, recomputed_signals

ASSET = Path(__file__).resolve().parents[2] / "src" / "sparsectx" / "assets" / "tiny-vlm"
# Pixel sizes (w, h) per family: images of three lengths, the first and last equal (so the full-attention
# blocks reorder tokens), and (Qwen2.5-VL: windows of 2x2 merged tokens) windows of 16, 8 and 4 patches.
SIZES = {
    "qwen2_5_vl": [(84, 140), (112, 56), (56, 56), (140, 84)],
    "qwen3_vl": [(96, 160), (128, 64), (64, 64), (160, 96)],
}
BUILDERS = {"qwen2_5_vl": (tiny_qwen2_5_vl, 14), "qwen3_vl": (tiny_qwen3_vl, 16)}
# At init scale the logits are near zero and attention is almost uniform: a wrong segment or a permuted
# signal would barely show. Scaled qkv weights give peaked attention, so these comparisons have teeth.
QKV_GAIN = 10.0


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def family_inputs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Returns (family, HF sdpa model, grouped copy, pixel_values, grid_thw) for images of several sizes."""
    build, patch = BUILDERS[request.param]
    processor = char_processor(patch, tmp_path_factory.mktemp(request.param))
    reference = build(processor.tokenizer, seed=0)
    with torch.no_grad():
        for block in reference.model.visual.blocks:
            block.attn.qkv.weight.mul_(QKV_GAIN)
    grouped = copy.deepcopy(reference)
    set_vision_attention(grouped, "grouped")
    images = [noise_image(w, h, seed) for seed, (w, h) in enumerate(SIZES[request.param])]
    inputs = processor.image_processor(images=images, return_tensors="pt")
    return request.param, reference, grouped, inputs["pixel_values"].float(), inputs["image_grid_thw"]


def _features(model, pixels: torch.Tensor, grid: torch.Tensor) -> list[torch.Tensor]:
    out = model.model.get_image_features(pixels, grid)
    return [*out.pooler_output, *(getattr(out, "deepstack_features", None) or [])]


@torch.no_grad()
def test_grouped_image_features_match_hf_sdpa(family_inputs) -> None:
    _, reference, grouped, pixels, grid = family_inputs
    assert grouped.config.vision_config._attn_implementation == va.NAME
    assert reference.config.vision_config._attn_implementation == "sdpa"
    for got, want in zip(_features(grouped, pixels, grid), _features(reference, pixels, grid), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_batch_has_segments_of_several_lengths(family_inputs) -> None:
    """Guards the test above: its batch must take the general gather/scatter path, not only the fold."""
    family, _, grouped, _, grid = family_inputs
    visual = grouped.model.visual
    images = va.group_segments(torch.cat([grid.new_zeros(1), grid.prod(-1).cumsum(0)]), int(grid.prod(-1).sum()), None)
    assert len(images.lengths) == 3
    if family == "qwen2_5_vl":
        _, cu = get_vision_window_index(grid, visual.spatial_merge_size, visual.window_size, visual.patch_size)
        windows = va.group_segments(cu, int(cu[-1]), None)
        assert set(windows.lengths) == {16, 8, 4} and windows.order is not None


@pytest.mark.parametrize("wrong", ["one-segment", "groups-swapped", "no-restore"])
@torch.no_grad()
def test_a_wrong_grouping_is_caught(family_inputs, monkeypatch, wrong: str) -> None:
    """The comparison above fails (by 100x its tolerance) when segments are merged, misplaced or left in
    grouped order."""
    _, reference, grouped, pixels, grid = family_inputs
    right = va.cached_groups

    def broken(cu_seqlens: torch.Tensor, total: int, max_length: int | None) -> va.SegmentGroups:
        groups = right(cu_seqlens, total, max_length)
        if wrong == "one-segment":
            return va.SegmentGroups((total,), (1,), None, None)
        if wrong == "groups-swapped":
            return dataclasses.replace(groups, lengths=groups.lengths[::-1], counts=groups.counts[::-1])
        return dataclasses.replace(groups, restore=groups.order)

    monkeypatch.setattr(va, "cached_groups", broken)
    got, want = torch.cat(_features(grouped, pixels, grid)), torch.cat(_features(reference, pixels, grid))
    assert (got - want).abs().max() > 1e-3


@pytest.mark.parametrize("chunk", [3, 8, 1000], ids=["rows-per-step", "segment-rows", "segments-per-step"])
@torch.no_grad()
def test_encode_images_signals_match_the_recompute(family_inputs, chunk: int) -> None:
    family, reference, grouped, pixels, grid = family_inputs
    adapter = adapter_for(grouped, signal_chunk=chunk)
    ours = adapter.encode_images(pixels, grid)
    visual = reference.model.visual
    attn = adapter.layout.signal_block(visual)
    with capture_attention_input(attn) as captured:
        embeds = visual(pixels, grid_thw=grid).pooler_output
    received, keys = merge_signals(
        *recomputed_signals(attn, captured[-1], chunk=64), adapter.merge_unit, adapter.layout.to_raster(visual, grid)
    )
    for name, want in (("embeds", embeds), ("attention_received", received), ("keys", keys)):
        got = torch.cat([getattr(image, name) for image in ours])
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{family} {n}: {m}")
    assert adapter.vision_calls == 1


@pytest.mark.parametrize("chunk", [1, 2, 5, 7, 100])
def test_attention_with_received_matches_float64_softmax(chunk: int) -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 5, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    probs = torch.softmax(q @ k.transpose(-1, -2) * 0.5, dim=-1)  # (count, heads, L, L)
    out, received = va.attention_with_received(q, k, v, 0.5, chunk)
    torch.testing.assert_close(out, probs @ v)
    torch.testing.assert_close(received, probs.mean(dim=1).sum(dim=1).float())
    torch.testing.assert_close(received.sum(dim=1), torch.full((3,), 5.0))


def test_group_segments_orders_tokens_by_length() -> None:
    groups = va.group_segments(torch.tensor([0, 4, 6, 10, 12, 12, 13], dtype=torch.int32), 13, None)
    assert groups.lengths == (4, 2, 1) and groups.counts == (2, 2, 1)
    assert groups.order.tolist() == [0, 1, 2, 3, 6, 7, 8, 9, 4, 5, 10, 11, 12]
    assert torch.equal(groups.order[groups.restore], torch.arange(13))
    equal = va.group_segments(torch.tensor([0, 3, 6, 9]), 9, 3)
    assert (equal.lengths, equal.counts, equal.order, equal.restore) == ((3,), (3,), None, None)


def test_grouping_is_computed_once_per_cu_seqlens_tensor(family_inputs, monkeypatch) -> None:
    """One grouping per cu_seqlens tensor of a forward (Qwen3-VL's three blocks share one), none kept across."""
    family, _, grouped, pixels, grid = family_inputs
    calls: list[int] = []
    right = va.group_segments

    def counting(cu_seqlens: torch.Tensor, total: int, max_length: int | None) -> va.SegmentGroups:
        calls.append(total)
        return right(cu_seqlens, total, max_length)

    monkeypatch.setattr(va, "group_segments", counting)
    with torch.no_grad():
        for _ in range(2):
            grouped.model.visual(pixels, grid_thw=grid)
    per_forward = 2 if family == "qwen2_5_vl" else 1  # windows + full images, or full images only
    assert len(calls) == 2 * per_forward


def test_bad_vision_attention_is_a_config_error() -> None:
    with pytest.raises(ValueError, match=r"model\.vision_attention='fast'.*\['grouped', 'hf'\]"):
        ModelConfig("tiny", "package:tiny-vlm", "float32", "cpu", "sdpa", 8, "fast", 1, 64, "auto")


@pytest.mark.parametrize("choice, expected", [("grouped", va.NAME), ("hf", "sdpa")])
def test_loaders_apply_the_switch(tmp_path: Path, choice: str, expected: str) -> None:
    cfg = ModelConfig("tiny", "package:tiny-vlm", "float32", "cpu", "sdpa", 8, choice, 1, 64, "auto")
    random_dir = tmp_path / "random"
    shutil.copytree(ASSET, random_dir, ignore=shutil.ignore_patterns("*.safetensors"))
    loaded = [
        load_model(cfg),
        load_eval_model(cfg, checkpoint=None, seed=0)[0],
        load_eval_model(cfg, checkpoint=str(random_dir), seed=0)[0],
    ]
    for model in (item.adapter.model for item in loaded):
        assert model.config.vision_config._attn_implementation == expected
        assert model.config.text_config._attn_implementation == "sdpa"
