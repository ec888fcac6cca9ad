"""The decode engine on Qwen3.5's hybrid decoder: KV slots for full attention, state slots for linear attention.

References: a full re-forward of the same pruned context per generated token (no cache at all), and HF's own
``DynamicCache`` decode step for the per-slot states.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from engine_setup import default_engine
from qwen3_5_models import tiny_bundle
from tiny_models import noise_image
from transformers import DynamicCache

from sparsectx.context import build_context
from sparsectx.encoding import encode_samples
from sparsectx.engine import DecodeEngine, pruned_prompts
from sparsectx.engine.hybrid_slots import HybridSlotCache, slot_cache_for
from sparsectx.engine.step import DecodeStep
from sparsectx.generation import SamplingConfig
from sparsectx.models.adapter import LLMInputs
from sparsectx.prompting import PromptItem
from sparsectx.pruning import select_tokens

STEPS = 8


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    """Returns a tiny hybrid Qwen3.5 (linear attention at layers 0-2, full attention at layer 3)."""
    return tiny_bundle(tmp_path_factory.mktemp("qwen3_5_engine"))


def _contexts(bundle, seed: int):
    """Returns (samples, selections): five prompts of different lengths, random selections at 10-75%."""
    p = bundle.patch
    items = [
        PromptItem("wide", [noise_image(p * 16, p * 12, 1)], "what colour?", "sys", "think"),
        PromptItem("small", [noise_image(p * 4, p * 4, 2)], "how many?", "sys", ""),
        PromptItem("two", [noise_image(p * 4, p * 6, 3), noise_image(p * 6, p * 4, 4)], "same?", "s", ""),
        PromptItem("text", [], "no image at all, only words", "s", ""),
        PromptItem("tall", [noise_image(p * 4, p * 8, 5)], "where?", "sys", ""),
    ]
    samples = encode_samples(bundle.adapter, bundle.processor, items)
    gen = torch.Generator().manual_seed(seed)
    budgets = [0.1, 0.75, 0.25, 1.0, 0.15]  # kept: 5 of 48, 3 of 4, 2 + 2 of 12, -, 1 of 8
    selections = [
        [select_tokens("random", im, s.question_embeds, b, gen, {}) for im in s.images]
        for s, b in zip(samples, budgets, strict=True)
    ]
    return samples, selections


def _reforward(adapter, samples, selections, steps: int) -> list[list[int]]:
    """Returns each prompt's greedy tokens from full forwards of prompt + tokens so far (no cache)."""
    produced = [torch.zeros(0, dtype=torch.long) for _ in samples]
    for _ in range(steps):
        ctx = build_context(adapter, samples, selections, produced)
        nxt = adapter.logits(adapter.run_llm(ctx.inputs, None)[:, -1]).argmax(-1)
        produced = [torch.cat([p, n[None]]) for p, n in zip(produced, nxt, strict=True)]
    return [p.tolist() for p in produced]


def _greedy(steps: int) -> SamplingConfig:
    return SamplingConfig(steps, False, 1.0, 1.0, 0, [], honour_stops=False)


@torch.no_grad()
@pytest.mark.parametrize("slots", [2, 5])
def test_cached_pruned_decoding_equals_a_full_reforward(hybrid, slots: int) -> None:
    adapter, tok = hybrid.adapter, hybrid.processor.tokenizer
    samples, selections = _contexts(hybrid, seed=3)
    kept = [sum(s.indices.numel() for s in sel) for sel in selections if sel]
    assert len(set(kept)) == len(kept)  # different kept counts, so different left padding per row
    engine = DecodeEngine(adapter, tok, default_engine())
    outs = engine.generate(pruned_prompts(adapter, samples, selections), _greedy(STEPS), slots=slots)
    assert [g.token_ids.tolist() for g in outs] == _reforward(adapter, samples, selections, STEPS)


@torch.no_grad()
def test_shared_prompts_prefill_once_and_decode_as_separate_ones(hybrid) -> None:
    adapter, tok = hybrid.adapter, hybrid.processor.tokenizer
    samples, selections = _contexts(hybrid, seed=4)
    group = [0, 0, 2, 2, 2]  # a GRPO-style group: the same sample and selection objects repeated
    prompts = pruned_prompts(adapter, [samples[i] for i in group], [selections[i] for i in group])
    assert prompts.shared is not None
    outs = DecodeEngine(adapter, tok, default_engine()).generate(prompts, _greedy(STEPS), slots=4)
    want = _reforward(adapter, [samples[0], samples[2]], [selections[0], selections[2]], STEPS)
    assert [g.token_ids.tolist() for g in outs] == [want[0]] * 2 + [want[1]] * 3


@torch.no_grad()
def test_a_slot_step_updates_the_states_in_place_as_hf_dynamic_cache_does(hybrid) -> None:
    adapter = hybrid.adapter
    samples, selections = _contexts(hybrid, seed=5)
    ctx = build_context(adapter, samples[:3], selections[:3])
    text_config = adapter.model.config.get_text_config()
    prefill = DynamicCache(config=text_config)
    adapter.run_llm(ctx.inputs, prefill)
    cache = slot_cache_for(prefill, slots=4, length=ctx.inputs.embeds.shape[1] + 4)
    assert isinstance(cache, HybridSlotCache)
    step = DecodeStep(adapter, cache, capture=False, compiled=False)
    linear = [i for i, states in enumerate(cache.layers) if states is not None]
    assert linear == [0, 1, 2] and cache.keys[3] is not None and cache.keys[0] is None
    pointers = [
        (cache.layers[i].conv_states[0].data_ptr(), cache.layers[i].recurrent_states[0].data_ptr()) for i in linear
    ]
    width = ctx.inputs.embeds.shape[1]
    cache.load([3, 0, 1], prefill, [ctx.inputs.attention_mask] * len(cache.keys))
    tokens = torch.tensor([7, 8, 9])
    step.tokens[[3, 0, 1]] = tokens
    step.positions[[3, 0, 1]] = ctx.next_position
    step.run()
    # HF's own decode step on its DynamicCache: the same token at the same position, the prompt's padding mask.
    mask = torch.cat([ctx.inputs.attention_mask, torch.ones(3, 1, dtype=torch.long)], dim=1)
    positions = ctx.next_position.view(1, -1, 1).expand(3, -1, 1)
    inputs = LLMInputs(adapter.embed_ids(tokens[:, None]), mask, positions, torch.zeros(3, 1, dtype=torch.bool))
    want = adapter.logits(adapter.run_llm(inputs, prefill)[:, -1])
    torch.testing.assert_close(step.logits[[3, 0, 1]], want, atol=1e-5, rtol=0)
    for i, (conv_ptr, rec_ptr) in zip(linear, pointers, strict=True):
        states = cache.layers[i]
        assert states.conv_states[0].data_ptr() == conv_ptr and states.recurrent_states[0].data_ptr() == rec_ptr
        torch.testing.assert_close(states.conv_states[0][[3, 0, 1]], prefill.layers[i].conv_states[0])
        torch.testing.assert_close(states.recurrent_states[0][[3, 0, 1]], prefill.layers[i].recurrent_states[0])
    assert torch.equal(cache.write_index[[3, 0, 1]], torch.full((3,), width + 1))
    assert torch.isfinite(step.logits[2]).all()  # the empty slot decodes finite numbers


@pytest.mark.skipif(shutil.which("cc") is None, reason="inductor's CPU backend needs a C compiler")
@torch.no_grad()
def test_compiled_hybrid_step_equals_the_reforward(hybrid) -> None:
    adapter, tok = hybrid.adapter, hybrid.processor.tokenizer
    samples, selections = _contexts(hybrid, seed=6)
    engine = DecodeEngine(adapter, tok, default_engine(cuda_graphs="off", compile="on"))
    assert engine.compiled
    outs = engine.generate(pruned_prompts(adapter, samples, selections), _greedy(STEPS), slots=3)
    assert [g.token_ids.tolist() for g in outs] == _reforward(adapter, samples, selections, STEPS)
