"""Qwen3.5 (hybrid linear/full attention) on tiny random-weight instances of the real HF class.

References are the plain HF model's own forward and ``generate`` and its own ``get_rope_index``.
"""

from __future__ import annotations

import copy
import importlib
from pathlib import Path

import pytest
import torch
from engine_setup import default_engine
from key_masking import causal_key_bias, kept_keys
from omegaconf import OmegaConf
from qwen3_5_models import tiny_bundle
from tiny_models import noise_image
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from sparsectx.context import build_context, keep_all
from sparsectx.encoding import encode_samples
from sparsectx.engine import DecodeEngine, pruned_prompts
from sparsectx.generation import SamplingConfig, response_logits
from sparsectx.models import adapter_for, set_vision_attention
from sparsectx.models.in_llm import LateDrop
from sparsectx.prompting import PromptItem, processor_inputs
from sparsectx.pruning import declared_signals, pruners_at, select_tokens
from sparsectx.pruning.base import IN_LLM
from sparsectx.pruning.base import PRE_LLM as PRE_LLM_STAGE
from sparsectx.pruning.layer import select_in_llm
from sparsectx.visual import Selection, VisionSignals

CONF = Path(__file__).resolve().parents[2] / "conf" / "pruner"
PRE_LLM = pruners_at(PRE_LLM_STAGE)
RESPONSES = [torch.tensor([20, 21, 22, 23]), torch.tensor([30, 31]), torch.tensor([40, 41, 42])]


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    """Returns a tiny hybrid Qwen3.5 (linear attention at layers 0-2, full attention at layer 3)."""
    return tiny_bundle(tmp_path_factory.mktemp("qwen3_5"))


@pytest.fixture(scope="module")
def all_full(tmp_path_factory):
    """Returns the same tiny Qwen3.5 with every decoder layer full attention."""
    return tiny_bundle(tmp_path_factory.mktemp("qwen3_5_full"), all_full=True)


def _items(patch: int) -> list[PromptItem]:
    return [
        PromptItem("wide", [noise_image(patch * 8, patch * 6, 1)], "what colour?", "sys", "think"),
        PromptItem("small", [noise_image(patch * 4, patch * 4, 2)], "how many?", "sys", ""),
        PromptItem(
            "two",
            [noise_image(patch * 4, patch * 6, 3), noise_image(patch * 6, patch * 4, 4)],
            "same?",
            "s",
            "",
        ),
    ]


def _random(samples, budget: float, seed: int) -> list[list[Selection]]:
    gen = torch.Generator().manual_seed(seed)
    return [[select_tokens("random", im, s.question_embeds, budget, gen, {}) for im in s.images] for s in samples]


def test_hybrid_fixture_has_both_layer_types(hybrid) -> None:
    types = hybrid.adapter.model.config.get_text_config().layer_types
    assert types == ["linear_attention"] * 3 + ["full_attention"]
    assert hybrid.adapter.family == "qwen3_5"


@torch.no_grad()
def test_budget_one_equals_plain_hf_model_logits(hybrid) -> None:
    items = _items(hybrid.patch)
    batch = processor_inputs(hybrid.processor, items)
    assert not batch["attention_mask"].bool().all()  # left padding is exercised
    reference = hybrid.adapter.model(**batch).logits
    samples = encode_samples(hybrid.adapter, hybrid.processor, items)
    ctx = build_context(hybrid.adapter, samples, [keep_all(s) for s in samples])
    ours = hybrid.adapter.logits(hybrid.adapter.run_llm(ctx.inputs, None))
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(ours[ctx.inputs.attention_mask.bool()], reference[real], atol=1e-5, rtol=0)


@torch.no_grad()
def test_budget_one_greedy_text_equals_hf_generate(hybrid) -> None:
    items, tok = _items(hybrid.patch), hybrid.processor.tokenizer
    batch = processor_inputs(hybrid.processor, items)
    config = GenerationConfig(max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=tok.pad_token_id)
    hf = hybrid.adapter.model.generate(**batch, generation_config=config)[:, batch["input_ids"].shape[1] :]
    samples = encode_samples(hybrid.adapter, hybrid.processor, items)
    prompts = pruned_prompts(hybrid.adapter, samples, [keep_all(s) for s in samples])
    ours = DecodeEngine(hybrid.adapter, tok, default_engine()).generate(
        prompts, SamplingConfig(10, False, 1.0, 1.0, 0, [])
    )
    assert max(gen.token_ids.numel() for gen in ours) == 10  # one row decodes the whole cap
    for row, gen in zip(hf, ours, strict=True):  # HF pads a row after its end-of-turn token
        assert gen.token_ids.tolist() == row[: gen.token_ids.numel()].tolist()
        assert gen.text == tok.decode(row[: gen.token_ids.numel()], skip_special_tokens=True)


@torch.no_grad()
def test_kept_tokens_keep_the_positions_of_get_rope_index(hybrid) -> None:
    adapter, items = hybrid.adapter, _items(hybrid.patch)
    batch = processor_inputs(hybrid.processor, items)
    want, deltas = adapter.model.model.get_rope_index(
        batch["input_ids"],
        batch["mm_token_type_ids"],
        image_grid_thw=batch["image_grid_thw"],
        attention_mask=batch["attention_mask"],
    )
    samples = encode_samples(adapter, hybrid.processor, items)
    selections = _random(samples, 0.2, seed=11)
    pruned = build_context(adapter, samples, selections, [torch.tensor([5, 6])] * 3)
    for b, (sample, sel) in enumerate(zip(samples, selections, strict=True)):
        real = batch["attention_mask"][b].bool()
        hf = want[:, b][:, real]
        assert torch.equal(sample.positions, hf)
        visual = sample.prompt_ids == adapter.image_token_id
        slots = torch.nonzero(visual).flatten()
        offsets = [sum(im.num_tokens for im in sample.images[:i]) for i in range(len(sel))]
        keep = ~visual
        keep[slots[torch.cat([s.indices + o for s, o in zip(sel, offsets, strict=True)])]] = True
        row = pruned.inputs.positions[:, b][:, pruned.inputs.attention_mask[b].bool()]
        assert torch.equal(row[:, :-2], hf[:, keep])
        next_hf = int(real.sum()) + int(deltas[b])  # HF decodes position L + rope delta next
        assert row[:, -2:].tolist() == [[next_hf, next_hf + 1]] * 3
        assert int(pruned.next_position[b]) == next_hf + 2


def _key_masked_logits(adapter, samples, selections, responses):
    """Keeps every token; full-attention layers mask the dropped ones as keys, linear layers see all of them."""
    full = build_context(adapter, samples, [keep_all(s) for s in samples], responses)
    padding = full.inputs.attention_mask.bool()
    bias = causal_key_bias(kept_keys(adapter, samples, selections, padding))
    full.inputs.attention_mask = {"full_attention": bias, "linear_attention": padding.long()}
    return response_logits(adapter, full)


@torch.no_grad()
def test_removal_equals_key_masking_only_when_every_layer_is_full_attention(hybrid, all_full) -> None:
    gaps = {}
    for name, bundle in (("all_full", all_full), ("hybrid", hybrid)):
        adapter = bundle.adapter
        samples = encode_samples(adapter, bundle.processor, _items(bundle.patch))
        selections = _random(samples, 0.3, seed=5)
        removed, mask = response_logits(adapter, build_context(adapter, samples, selections, RESPONSES))
        masked, mask_k = _key_masked_logits(adapter, samples, selections, RESPONSES)
        assert torch.equal(mask, mask_k)
        gaps[name] = float((removed[mask] - masked[mask]).abs().max())
    assert gaps["all_full"] < 1e-4  # design invariant 2 on full attention
    # A key mask cannot take a token out of a recurrent state or a convolution window: ten times the
    # tolerance above, and a hundred times the all-full gap (fp32 rounding), apart.
    assert gaps["hybrid"] > max(1e-3, 100 * gaps["all_full"])


@torch.no_grad()
def test_three_budgets_run_the_vision_tower_once(hybrid) -> None:
    adapter = hybrid.adapter
    before = adapter.vision_calls
    samples = encode_samples(adapter, hybrid.processor, _items(hybrid.patch))
    for budget in (0.1, 0.11, 1.0):
        build_context(adapter, samples, _random(samples, budget, seed=0))
    assert adapter.vision_calls - before == 1


@pytest.mark.parametrize("name", PRE_LLM)
@torch.no_grad()
def test_every_pre_llm_pruner_keeps_exactly_k_per_image(name: str, hybrid) -> None:
    adapter = hybrid.adapter
    params = OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"))["params"]
    adapter.vision_signals = declared_signals(name, params, seed=0)
    try:
        samples = encode_samples(adapter, hybrid.processor, _items(hybrid.patch))
    finally:
        adapter.vision_signals = declared_signals("random", {}, seed=0)
    for budget in (0.05, 0.3, 1.0):
        gen = torch.Generator().manual_seed(1)
        for sample in samples:
            for image in sample.images:
                n = image.num_tokens
                assert image.attention_received.shape == (n,) and image.embeds.shape == (n, 64)
                selection = select_tokens(name, image, sample.question_embeds, budget, gen, params)
                k = min(max(round(budget * n), 1), n)  # clamp(round(b N), 1, N), design invariant 4
                assert selection.indices.numel() == k and selection.embeds.shape == (k, 64)
        ctx = build_context(adapter, samples, _random(samples, budget, seed=2))
        assert torch.isfinite(adapter.run_llm(ctx.inputs, None)).all()


@torch.no_grad()
def test_in_llm_pruners_are_a_config_error_naming_the_key(hybrid) -> None:
    adapter = hybrid.adapter
    samples = encode_samples(adapter, hybrid.processor, _items(hybrid.patch))
    for name in pruners_at(IN_LLM):
        params = OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"))["params"]
        with pytest.raises(ValueError, match=r"pruner\.stage=llm \(pruner\.layer=2\).*qwen3_5.*linear attention"):
            select_in_llm(adapter, samples, name, 0.3, params, 2)
    ctx = build_context(adapter, samples, [keep_all(s) for s in samples])
    ctx.inputs.late = LateDrop(3, ctx.inputs.attention_mask.bool())
    with pytest.raises(ValueError, match=r"pruner\.stage=llm \(pruner\.layer=3\)"):
        adapter.run_llm(ctx.inputs, None)


def test_an_unsupported_family_names_qwen3_5_among_the_supported() -> None:
    config = LlamaConfig(
        vocab_size=16,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    with pytest.raises(KeyError, match=r"'llama' has no adapter; supported: .*qwen3_5"):
        adapter_for(LlamaForCausalLM(config), signal_chunk=8)


@pytest.mark.parametrize("vision_attention", ["hf", "grouped"])
@torch.no_grad()
def test_signals_are_the_towers_own_eager_attention(vision_attention: str, hybrid, monkeypatch) -> None:
    model = copy.deepcopy(hybrid.adapter.model)
    set_vision_attention(model, vision_attention)
    adapter = adapter_for(model, signal_chunk=8)
    adapter.vision_signals = VisionSignals(object_attention=True)
    images = [noise_image(hybrid.patch * w, hybrid.patch * h, seed) for seed, (w, h) in enumerate([(6, 4), (4, 8)])]
    inputs = hybrid.processor.image_processor(images=images, return_tensors="pt")
    got = adapter.encode_images(inputs["pixel_values"], inputs["image_grid_thw"])
    # Reference: the tower under HF's eager attention, each block's weights per image, mean over heads, summed
    # over queries, then the mean over each merged token's 4 patches (the tower runs in raster order).
    module = importlib.import_module(type(model).__module__)
    calls: dict[int, list[torch.Tensor]] = {}
    original = module.eager_attention_forward

    def recording(attn, *args, **kwargs):  # noqa: ANN001, ANN202
        out, weights = original(attn, *args, **kwargs)
        calls.setdefault(id(attn), []).append(weights[0].mean(0).sum(0))
        return out, weights

    reference = copy.deepcopy(hybrid.adapter.model).model.visual
    monkeypatch.setattr(module, "eager_attention_forward", recording)
    monkeypatch.setattr(reference.config, "_attn_implementation", "eager")
    reference(inputs["pixel_values"], grid_thw=inputs["image_grid_thw"])
    per_block = [torch.cat(calls[id(block.attn)]).reshape(-1, 4).mean(1) for block in reference.blocks]
    last, middle = per_block[-1], per_block[len(per_block) // 2 - 1]
    torch.testing.assert_close(torch.cat([im.attention_received for im in got]), last, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat([im.object_attention for im in got]), middle, atol=1e-5, rtol=1e-5)
    assert (last - middle).abs().max() > 1e-3  # two different blocks
