"""The design invariants of the sparse-context core, on tiny random-weight models of both families."""

from __future__ import annotations

import torch
from engine_setup import default_engine
from key_masking import causal_key_bias, kept_keys
from tiny_models import noise_image
from transformers import GenerationConfig

from sparsectx.context import build_context, keep_all
from sparsectx.encoding import encode_samples
from sparsectx.engine import DecodeEngine, pruned_prompts
from sparsectx.generation import SamplingConfig, response_logits
from sparsectx.prompting import PromptItem, processor_inputs
from sparsectx.pruning import select_tokens
from sparsectx.visual import Selection


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


def _greedy(max_new: int) -> SamplingConfig:
    return SamplingConfig(max_new, False, 1.0, 1.0, 0, [])


def _random_selections(samples, budget: float, seed: int) -> list[list[Selection]]:
    gen = torch.Generator().manual_seed(seed)
    return [[select_tokens("random", im, s.question_embeds, budget, gen, {}) for im in s.images] for s in samples]


@torch.no_grad()
def test_budget_one_equals_plain_hf_model_logits(tiny_vlm):
    items = _items(tiny_vlm.patch)
    batch = processor_inputs(tiny_vlm.processor, items)
    reference = tiny_vlm.adapter.model(**batch).logits
    samples = encode_samples(tiny_vlm.adapter, tiny_vlm.processor, items)
    ctx = build_context(tiny_vlm.adapter, samples, [keep_all(s) for s in samples])
    ours = tiny_vlm.adapter.logits(tiny_vlm.adapter.run_llm(ctx.inputs, None))
    real = batch["attention_mask"].bool()
    assert ours[ctx.inputs.attention_mask.bool()].shape == reference[real].shape
    torch.testing.assert_close(ours[ctx.inputs.attention_mask.bool()], reference[real], atol=1e-5, rtol=0)


@torch.no_grad()
def test_budget_one_greedy_text_equals_hf_generate(tiny_vlm):
    items = _items(tiny_vlm.patch)
    tok = tiny_vlm.processor.tokenizer
    batch = processor_inputs(tiny_vlm.processor, items)
    config = GenerationConfig(max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=tok.pad_token_id)
    hf = tiny_vlm.adapter.model.generate(**batch, generation_config=config)
    hf_new = hf[:, batch["input_ids"].shape[1] :]
    samples = encode_samples(tiny_vlm.adapter, tiny_vlm.processor, items)
    prompts = pruned_prompts(tiny_vlm.adapter, samples, [keep_all(s) for s in samples])
    ours = DecodeEngine(tiny_vlm.adapter, tok, default_engine()).generate(prompts, _greedy(12))
    for row, gen in zip(hf_new, ours, strict=True):
        assert gen.token_ids.tolist() == row[: gen.token_ids.numel()].tolist()
        assert gen.text == tok.decode(row[: gen.token_ids.numel()], skip_special_tokens=True)


def _key_masked_logits(adapter, samples, selections, responses):
    """Keeps every token but masks dropped visual tokens as attention keys (an explicit 4D mask).

    Only valid for selections whose vectors equal the original tokens (not VisionZip's merges)."""
    full = build_context(adapter, samples, [keep_all(s) for s in samples], responses)
    keys = kept_keys(adapter, samples, selections, full.inputs.attention_mask.bool())
    full.inputs.attention_mask = causal_key_bias(keys)
    return response_logits(adapter, full)


@torch.no_grad()
def test_physical_removal_equals_key_masking(tiny_vlm):
    adapter = tiny_vlm.adapter
    samples = encode_samples(adapter, tiny_vlm.processor, _items(tiny_vlm.patch))
    selections = _random_selections(samples, 0.3, seed=5)
    responses = [torch.tensor([20, 21, 22, 23]), torch.tensor([30, 31]), torch.tensor([40, 41, 42])]
    pruned = build_context(adapter, samples, selections, responses)
    assert pruned.kept_visual.tolist() == [sum(s.indices.numel() for s in sel) for sel in selections]
    masked, mask = _key_masked_logits(adapter, samples, selections, responses)
    logits, mask_p = response_logits(adapter, pruned)
    assert torch.equal(mask, mask_p)
    torch.testing.assert_close(logits[mask], masked[mask], atol=1e-4, rtol=0)


@torch.no_grad()
def test_cached_generation_equals_full_reforward_loop(tiny_vlm):
    adapter, tok = tiny_vlm.adapter, tiny_vlm.processor.tokenizer
    samples = encode_samples(adapter, tiny_vlm.processor, _items(tiny_vlm.patch))
    selections = _random_selections(samples, 0.25, seed=3)
    steps = 8
    engine = DecodeEngine(adapter, tok, default_engine())
    cached = engine.generate(pruned_prompts(adapter, samples, selections), _greedy(steps))
    produced = [torch.zeros(0, dtype=torch.long) for _ in samples]
    for _ in range(steps):
        ctx = build_context(adapter, samples, selections, produced)
        hidden = adapter.run_llm(ctx.inputs, None)
        nxt = adapter.logits(hidden[:, -1]).argmax(-1)
        produced = [torch.cat([p, n[None]]) for p, n in zip(produced, nxt, strict=True)]
    for gen, ref in zip(cached, produced, strict=True):
        assert gen.token_ids.tolist() == ref[: gen.token_ids.numel()].tolist()
        assert gen.token_ids.numel() == steps


@torch.no_grad()
def test_kept_tokens_keep_unpruned_positions(tiny_vlm):
    adapter = tiny_vlm.adapter
    samples = encode_samples(adapter, tiny_vlm.processor, _items(tiny_vlm.patch))
    selections = _random_selections(samples, 0.2, seed=11)
    full = build_context(adapter, samples, [keep_all(s) for s in samples], [torch.tensor([5, 6])] * 3)
    pruned = build_context(adapter, samples, selections, [torch.tensor([5, 6])] * 3)
    for b, (sample, sel) in enumerate(zip(samples, selections, strict=True)):
        full_pos = full.inputs.positions[:, b][:, full.inputs.attention_mask[b].bool()]
        pruned_pos = pruned.inputs.positions[:, b][:, pruned.inputs.attention_mask[b].bool()]
        visual_full = full_pos[:, full.inputs.visual_mask[b][full.inputs.attention_mask[b].bool()]]
        kept = torch.cat([s.indices + sum(im.num_tokens for im in sample.images[:i]) for i, s in enumerate(sel)])
        visual_pruned = pruned_pos[:, pruned.inputs.visual_mask[b][pruned.inputs.attention_mask[b].bool()]]
        assert torch.equal(visual_pruned, visual_full[:, kept])
        assert torch.equal(pruned_pos[:, -2:], full_pos[:, -2:])
        assert pruned.next_position[b] == full.next_position[b] == sample.next_position + 2


@torch.no_grad()
def test_three_budgets_run_the_vision_tower_once(tiny_vlm):
    adapter = tiny_vlm.adapter
    before = adapter.vision_calls
    samples = encode_samples(adapter, tiny_vlm.processor, _items(tiny_vlm.patch))
    for budget in (0.1, 0.11, 1.0):
        build_context(adapter, samples, _random_selections(samples, budget, seed=0))
    assert adapter.vision_calls - before == 1


@torch.no_grad()
def test_text_only_sample_builds_a_context(tiny_vlm):
    samples = encode_samples(tiny_vlm.adapter, tiny_vlm.processor, [PromptItem("txt", [], "no image here", "s", "")])
    ctx = build_context(tiny_vlm.adapter, samples, [[]])
    assert int(ctx.kept_visual[0]) == 0
    assert ctx.inputs.embeds.shape[1] == samples[0].prompt_ids.numel()
