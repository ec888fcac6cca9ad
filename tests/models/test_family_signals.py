"""GLM-4.6V and LLaVA-OneVision pruner signals, tile packing, and their configuration errors.

References: SigLIP's own eager attention weights, HF's forward on a downscaled any-resolution mosaic, the
softmax identity (each query's attention sums to 1), and the supported-family list of ``adapter_for``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from family_models import family_model
from omegaconf import OmegaConf
from tiny_models import noise_image
from transformers import LlamaConfig, LlamaForCausalLM

from sparsectx.context import build_context, keep_all
from sparsectx.encoding import encode_samples
from sparsectx.models import ModelConfig, adapter_for, load_model, set_vision_attention
from sparsectx.prompting import PromptItem, processor_inputs
from sparsectx.pruning import select_tokens

CONF = Path(__file__).resolve().parents[2] / "conf" / "pruner"


def _lone(size: int) -> list[PromptItem]:
    return [
        PromptItem("wide", [noise_image(size * 8, size * 6, 1)], "what?", "sys", ""),
        PromptItem("tall", [noise_image(size * 3, size * 7, 2)], "where?", "sys", ""),
    ]


@torch.no_grad()
def test_llava_signals_equal_siglips_own_attention_weights(tmp_path) -> None:
    model, processor = family_model("llava_onevision", tmp_path)
    adapter = adapter_for(model, signal_chunk=8)
    items = _lone(16)
    batch = processor_inputs(processor, items)
    samples = encode_samples(adapter, processor, items)
    inner = model.model
    model.set_attn_implementation({"vision_config": "eager"})
    views = batch["image_grid_thw"][:, 0].tolist()
    pixels = torch.cat([p[:v] for p, v in zip(batch["pixel_values"], views, strict=True)])
    out = inner.vision_tower(pixels, output_attentions=True, return_dict=True)
    received = out.attentions[-1].mean(1).sum(1)  # (views, P): the layer the projector reads
    packed, _ = inner.pack_image_features(
        list(torch.split(received[..., None], views)),
        batch["image_sizes"],
        torch.zeros(1),
        model.config.vision_aspect_ratio,
    )
    side = model.config.vision_config.image_size // model.config.vision_config.patch_size
    for sample, want in zip(samples, packed, strict=True):
        (image,) = sample.images
        assert views[0] > 1 and image.num_tokens > side * side + 1  # tiled: base view, tiles and newlines
        torch.testing.assert_close(image.attention_received, want[:, 0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(image.attention_received[: side * side].sum(), torch.tensor(side * side * 1.0))
        assert image.keys.shape == (image.num_tokens, 16) and torch.isfinite(image.keys).all()


@torch.no_grad()
def test_llava_downscaled_mosaic_equals_hf_and_keeps_exactly_k(tmp_path) -> None:
    model, processor = family_model("llava_onevision", tmp_path, aspect="anyres_max_1")
    adapter = adapter_for(model, signal_chunk=8)
    items = _lone(16)
    batch = processor_inputs(processor, items)
    hf = {k: v for k, v in batch.items() if k != "image_grid_thw"}
    reference = model(**hf).logits
    samples = encode_samples(adapter, processor, items)
    ctx = build_context(adapter, samples, [keep_all(s) for s in samples])
    ours = adapter.logits(adapter.run_llm(ctx.inputs, None))
    torch.testing.assert_close(
        ours[ctx.inputs.attention_mask.bool()], reference[batch["attention_mask"].bool()], atol=1e-5, rtol=0
    )
    gen = torch.Generator().manual_seed(0)
    for sample in samples:
        (image,) = sample.images
        assert image.attention_received.shape == image.keys.shape[:1] == (image.num_tokens,)
        for name in ("visionzip", "divprune"):
            params = OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"))["params"]
            selection = select_tokens(name, image, sample.question_embeds, 0.2, gen, params)
            assert selection.indices.numel() == round(0.2 * image.num_tokens)


@torch.no_grad()
def test_glm_grouped_and_recomputed_signals_agree_and_sum_to_the_queries(tmp_path) -> None:
    model, processor = family_model("glm46v", tmp_path)
    items = _lone(14)
    recomputed = encode_samples(adapter_for(model, 8), processor, items)
    set_vision_attention(model, "grouped")
    grouped = encode_samples(adapter_for(model, 8), processor, items)
    for a, b in zip(recomputed, grouped, strict=True):
        for x, y in zip(a.images, b.images, strict=True):
            torch.testing.assert_close(x.attention_received, y.attention_received, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(x.keys, y.keys, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(x.embeds, y.embeds, atol=1e-5, rtol=1e-5)
            # 4 patches per merged token, each patch's query sums to 1: merged means total N
            torch.testing.assert_close(x.attention_received.sum(), torch.tensor(float(x.num_tokens)))


def _model_config(path: str, tile_budget: str | None) -> ModelConfig:
    return ModelConfig("t", path, "float32", "cpu", "sdpa", 8, "hf", 1, 0, "off", tile_budget)


def test_tile_budget_on_a_qwen_checkpoint_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"model\.tile_budget='pooled' applies to tiled families \(llava_onevision\)"):
        load_model(_model_config("package:tiny-vlm", "pooled"))
    with pytest.raises(ValueError, match=r"model\.tile_budget"):
        _model_config("package:tiny-vlm", "per_tile")


def test_a_llava_checkpoint_without_tile_budget_is_a_config_error(tmp_path) -> None:
    family_model("llava_onevision", tmp_path)  # config.json and processor files (training tests load weights)
    with pytest.raises(ValueError, match=r"model\.tile_budget is null but 'llava_onevision'.*tile_budget=pooled"):
        load_model(_model_config(str(tmp_path), None))


def test_unsupported_families_name_the_supported_ones(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llavaonevision1_5"}))
    with pytest.raises(
        KeyError,
        match=r"'llavaonevision1_5' has no adapter \(LLaVA-OneVision-1\.5 has no class"
        r" in transformers 5\.17.*supported: .*glm46v, llava_onevision",
    ):
        load_model(_model_config(str(tmp_path), None))
    config = LlamaConfig(
        vocab_size=16,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    with pytest.raises(KeyError, match=r"'llama' has no adapter; supported: .*glm46v, llava_onevision"):
        adapter_for(LlamaForCausalLM(config), signal_chunk=8)


@pytest.mark.parametrize("aspect", ["anyres_max_9", "anyres_max_1"])
@torch.no_grad()
def test_llava_token_counts_equal_hfs_packed_lengths(aspect: str, tmp_path) -> None:
    model, processor = family_model("llava_onevision", tmp_path, aspect=aspect)
    side = model.config.vision_config.image_size // model.config.vision_config.patch_size
    sizes = torch.tensor([[h, w] for h in (7, 31, 33, 50, 64, 97, 200) for w in (5, 32, 45, 64, 120, 301)])
    layouts = processor.layouts([[None] for _ in sizes], sizes)  # each image alone in its prompt: tiled
    features = [torch.zeros(views, side * side, 1) for views in layouts[:, 0].tolist()]
    packed, _ = model.model.pack_image_features(features, sizes, torch.zeros(1), aspect)
    assert processor.token_counts(layouts) == [p.shape[0] for p in packed]
    assert processor.token_counts(layouts[:1].clone().fill_(1)) == [side * side + 1]  # base view only
