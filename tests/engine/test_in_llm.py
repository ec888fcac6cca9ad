"""In-LLM pruning (FastV, DART before decoder layer K) on tiny random 4-layer Qwen2.5-VL and Qwen3-VL (fp32, CPU).

Independent references: the key-masking oracle (every token kept, dropped visual tokens masked as attention
keys in layers >= K through HF's own forward, spec 1.7); a full re-forward per generated token; HF's eager
attention weights, KV cache and decoder-layer inputs for the signals; a float64 brute force of each rule.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from engine_setup import default_engine
from key_masking import causal_key_bias, kept_keys
from tiny_models import char_processor, noise_image, tiny_qwen2_5_vl, tiny_qwen3_vl
from transformers import DynamicCache

from sparsectx.context import build_context, keep_all
from sparsectx.encoding import encode_samples
from sparsectx.engine import DecodeEngine, pruned_prompts
from sparsectx.engine.slots import SlotCache, decode_attention
from sparsectx.generation import SamplingConfig, response_logits
from sparsectx.models import adapter_for
from sparsectx.models.adapter import LLMInputs
from sparsectx.models.in_llm import layer_masks
from sparsectx.prompting import PromptItem, processor_inputs
from sparsectx.pruning import PRUNERS, select_tokens
from sparsectx.pruning.layer import fused_prompts, image_signals, select_in_llm

LAYERS = 4
PRUNERS_UNDER_TEST = {"fastv": {}, "dart": {"pivot_image": 2, "pivot_text": 3}}


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def tiny(request, tmp_path_factory):
    """Returns (adapter, processor, patch) of a tiny random 4-layer model of each family."""
    patch = 14 if request.param == "qwen2_5_vl" else 16
    processor = char_processor(patch, tmp_path_factory.mktemp(request.param))
    build = tiny_qwen2_5_vl if request.param == "qwen2_5_vl" else tiny_qwen3_vl
    return adapter_for(build(processor.tokenizer, seed=0, layers=LAYERS), signal_chunk=8), processor, patch


def _items(patch: int) -> list[PromptItem]:
    return [
        PromptItem("wide", [noise_image(patch * 8, patch * 6, 1)], "what colour is it?", "sys", "think"),
        PromptItem("small", [noise_image(patch * 4, patch * 4, 2)], "how many?", "sys", ""),
        PromptItem(
            "two",
            [noise_image(patch * 4, patch * 6, 3), noise_image(patch * 6, patch * 4, 4)],
            "same?",
            "s",
            "",
        ),
    ]


def _selections(adapter, samples, name: str, layer: int, budgets=(0.3, 0.5, 0.5)):
    """Returns each sample's in-LLM selection at its own budget (different kept counts in one batch)."""
    return [
        select_in_llm(adapter, [s], name, b, PRUNERS_UNDER_TEST[name], layer)[0]
        for s, b in zip(samples, budgets, strict=True)
    ]


def _key_masked_logits(adapter, samples, selections, responses, layer: int):
    """Returns response logits of the full context with dropped visual tokens masked as keys in layers >= K.

    HF's own text-model forward runs; a pre-hook on each layer >= K swaps its mask for the key-masked one."""
    full = build_context(adapter, samples, [keep_all(s) for s in samples], responses)
    bias = causal_key_bias(kept_keys(adapter, samples, selections, full.inputs.attention_mask.bool()))

    def swap(module, args, kwargs):
        return args, {**kwargs, "attention_mask": bias}

    hooks = [
        layer_.register_forward_pre_hook(swap, with_kwargs=True) for layer_ in adapter.language_model.layers[layer:]
    ]
    try:
        return response_logits(adapter, full)
    finally:
        for hook in hooks:
            hook.remove()


@pytest.mark.parametrize("layer", [1, 2])
@pytest.mark.parametrize("name", sorted(PRUNERS_UNDER_TEST))
@torch.no_grad()
def test_removal_at_layer_k_equals_key_masking(tiny, name, layer):
    adapter, processor, patch = tiny
    samples = encode_samples(adapter, processor, _items(patch))
    selections = _selections(adapter, samples, name, layer)
    responses = [torch.tensor([20, 21, 22, 23]), torch.tensor([30, 31]), torch.tensor([40, 41, 42])]
    pruned = build_context(adapter, samples, selections, responses)
    assert len(set(pruned.kept_visual.tolist())) == 3, "kept counts should differ between samples"
    assert pruned.inputs.attention_mask.eq(0).any(), "the batch should be left-padded"
    masked, mask = _key_masked_logits(adapter, samples, selections, responses, layer)
    logits, mask_p = response_logits(adapter, pruned)
    assert torch.equal(mask, mask_p)
    torch.testing.assert_close(logits[mask], masked[mask], atol=1e-4, rtol=0)
    # The oracle differs from keeping every token: the drop changed something.
    unpruned, _ = response_logits(adapter, build_context(adapter, samples, [keep_all(s) for s in samples], responses))
    assert (unpruned[mask] - logits[mask]).abs().max() > 1e-3


@pytest.mark.parametrize("name", sorted(PRUNERS_UNDER_TEST))
@torch.no_grad()
def test_cached_decoding_equals_full_reforward(tiny, name):
    adapter, processor, patch = tiny
    samples = encode_samples(adapter, processor, _items(patch))
    selections = _selections(adapter, samples, name, layer=2)
    steps = 8
    engine = DecodeEngine(adapter, processor.tokenizer, default_engine())
    sampling = SamplingConfig(steps, False, 1.0, 1.0, 0, [], honour_stops=False)
    cached = engine.generate(pruned_prompts(adapter, samples, selections), sampling, slots=2)
    produced = [torch.zeros(0, dtype=torch.long) for _ in samples]
    for _ in range(steps):
        ctx = build_context(adapter, samples, selections, produced)
        nxt = adapter.logits(adapter.run_llm(ctx.inputs, None)[:, -1]).argmax(-1)
        produced = [torch.cat([p, n[None]]) for p, n in zip(produced, nxt, strict=True)]
    for gen, ref in zip(cached, produced, strict=True):
        assert gen.token_ids.tolist() == ref.tolist()


@pytest.mark.parametrize("name", sorted(PRUNERS_UNDER_TEST))
@torch.no_grad()
def test_slot_decode_logits_equal_full_reforward(tiny, name):
    """One slot-cache decode step after an in-LLM prefill (per-layer valid keys) gives the re-forward's logits."""
    adapter, processor, patch = tiny
    samples = encode_samples(adapter, processor, _items(patch))
    selections = _selections(adapter, samples, name, layer=2)
    ctx = build_context(adapter, samples, selections)
    prefill = DynamicCache(config=adapter.model.config.get_text_config())
    first = adapter.logits(adapter.run_llm(ctx.inputs, prefill)[:, -1]).argmax(-1)
    assert prefill.layers[1].keys.shape[2] > prefill.layers[2].keys.shape[2]  # layers >= K hold fewer keys
    cache = SlotCache(prefill, len(samples), ctx.inputs.embeds.shape[1] + 4)
    cache.load(list(range(len(samples))), prefill, layer_masks(ctx.inputs, LAYERS))
    cache.mark_written()
    positions = ctx.next_position.view(1, -1, 1).expand(3, -1, 1)
    visual = torch.zeros(len(samples), 1, dtype=torch.bool)
    step = LLMInputs(adapter.embed_ids(first[:, None]), cache.attention_mask(), positions, visual)
    with decode_attention(adapter.model.config.get_text_config()):
        logits = adapter.logits(adapter.run_llm(step, cache)[:, -1])
    again = build_context(adapter, samples, selections, [f[None] for f in first])
    reference = adapter.logits(adapter.run_llm(again.inputs, None)[:, -1])
    torch.testing.assert_close(logits, reference, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", sorted(PRUNERS_UNDER_TEST))
@torch.no_grad()
def test_exactly_k_tokens_per_image_after_layer_k(tiny, name):
    adapter, processor, patch = tiny
    samples = encode_samples(adapter, processor, _items(patch))
    text = [int((s.prompt_ids != adapter.image_token_id).sum()) for s in samples]
    for budget in (0.01, 0.05, 0.1, 0.2, 0.5, 1.0):
        selections = select_in_llm(adapter, samples, name, budget, PRUNERS_UNDER_TEST[name], 2)
        for sample, sel in zip(samples, selections, strict=True):
            for image, s in zip(sample.images, sel, strict=True):
                k = max(1, min(image.num_tokens, round(budget * image.num_tokens)))
                assert s.indices.numel() == len(set(s.indices.tolist())) == k
        ctx = build_context(adapter, samples, selections)
        masks = layer_masks(ctx.inputs, LAYERS)
        kept = [sum(s.indices.numel() for s in sel) for sel in selections]
        full = [s.prompt_ids.numel() for s in samples]
        assert [int(m.sum()) for m in masks[0].unbind()] == full  # layers < K hold every token
        assert [int(m.sum()) for m in masks[2].unbind()] == [t + k for t, k in zip(text, kept, strict=True)]
        assert ctx.kept_visual.tolist() == kept


@pytest.mark.parametrize("name", sorted(PRUNERS_UNDER_TEST))
@torch.no_grad()
def test_selection_is_prompt_only(tiny, name):
    """Scoring a teacher-forced context (prompt + response) at the last prompt token picks the same tokens."""
    adapter, processor, patch = tiny
    samples = encode_samples(adapter, processor, _items(patch))
    prompt_only = select_in_llm(adapter, samples, name, 0.3, PRUNERS_UNDER_TEST[name], 2)
    responses = [torch.tensor([50, 51, 52, 53, 54]), torch.tensor([60]), torch.tensor([70, 71])]
    ctx = build_context(adapter, samples, [keep_all(s) for s in samples], responses)
    signals = adapter.llm_signals(ctx.inputs, 2, ctx.prompt_end - 1)
    width = ctx.inputs.embeds.shape[1]
    for row, (sample, sel) in enumerate(zip(samples, prompt_only, strict=True)):
        start = width - sample.prompt_ids.numel() - responses[row].numel()
        for s, sig in zip(sel, image_signals(signals, row, sample, start, adapter.image_token_id), strict=True):
            select = PRUNERS.get(name).select
            assert select(sig, s.indices.numel(), **PRUNERS_UNDER_TEST[name]).tolist() == s.indices.tolist()


def _reference_signals(adapter, processor, item, layer: int):
    """Returns HF's own layer K-1 signals of one unpadded prompt: eager attention row, cached keys, layer-K input."""
    batch = processor_inputs(processor, [item])
    configs = [adapter.model.config.get_text_config(), adapter.model.config.vision_config]
    captured = {}

    def capture(module, args, kwargs):
        captured["hidden"] = args[0] if args else kwargs["hidden_states"]

    hook = adapter.language_model.layers[layer].register_forward_pre_hook(capture, with_kwargs=True)
    previous = [c._attn_implementation_internal for c in configs]
    for c in configs:
        c._attn_implementation_internal = "eager"
    try:
        out = adapter.model(**batch, output_attentions=True, use_cache=True)
    finally:
        for c, p in zip(configs, previous, strict=True):
            c._attn_implementation_internal = p
        hook.remove()
    row = out.attentions[layer - 1][0, :, -1].double().mean(0)
    keys = out.past_key_values.layers[layer - 1].keys[0].transpose(0, 1).reshape(row.numel(), -1).double()
    hidden = adapter.language_model.norm(captured["hidden"])[0].double()
    return batch["input_ids"][0], row, keys, hidden


def _dart_brute_force(keys, hidden, text_keys, text_hidden, k, pivot_image, pivot_text):
    """Float64 DART rule, written out with Python lists: pivots by L1 key norm, then least-cosine picks."""
    norms = [float(v) for v in keys.abs().sum(-1)]
    image_pivots = sorted(range(len(norms)), key=lambda i: (-norms[i], i))[: min(pivot_image, k)]
    text_norms = [float(v) for v in text_keys.abs().sum(-1)]
    text_pivots = sorted(range(len(text_norms)), key=lambda i: (-text_norms[i], i))[:pivot_text]
    pivots = [hidden[i] for i in image_pivots] + [text_hidden[i] for i in text_pivots]
    kept = set(image_pivots)
    needed = k - len(kept)
    per = -(-needed // len(pivots))
    for vector in pivots:
        take = min(per, needed)
        free = [i for i in range(len(norms)) if i not in kept]
        cos = {i: float(F.cosine_similarity(hidden[i], vector, dim=0)) for i in free}
        kept.update(sorted(free, key=lambda i: (cos[i], i))[:take])
        needed -= take
    return sorted(kept)


@pytest.mark.parametrize("layer", [1, 3])
@torch.no_grad()
def test_signals_and_selections_match_hf_reference(tiny, layer):
    adapter, processor, patch = tiny
    item = _items(patch)[0]
    ids, row, keys, hidden = _reference_signals(adapter, processor, item, layer)
    sample = encode_samples(adapter, processor, [item])[0]
    image_slots = torch.nonzero(ids == adapter.image_token_id).flatten()
    text_slots = torch.arange(int(image_slots[-1]) + 1, ids.numel())
    ctx = build_context(adapter, [sample], [keep_all(sample)])
    ours = image_signals(
        adapter.llm_signals(ctx.inputs, layer, ctx.prompt_end - 1), 0, sample, 0, adapter.image_token_id
    )[0]
    torch.testing.assert_close(ours.attention.double(), row[image_slots], atol=1e-6, rtol=0)
    torch.testing.assert_close(ours.keys.double(), keys[image_slots], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.text_keys.double(), keys[text_slots], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.hidden.double(), hidden[image_slots], atol=1e-5, rtol=1e-5)
    n = sample.images[0].num_tokens
    for budget in (0.05, 0.2, 0.5, 1.0):
        k = max(1, min(n, round(budget * n)))
        fastv = select_in_llm(adapter, [sample], "fastv", budget, {}, layer)[0][0].indices.tolist()
        assert fastv == sorted(sorted(range(n), key=lambda i: (-float(row[image_slots][i]), i))[:k])
        dart = select_in_llm(adapter, [sample], "dart", budget, PRUNERS_UNDER_TEST["dart"], layer)[0][0]
        expected = _dart_brute_force(
            keys[image_slots], hidden[image_slots], keys[text_slots], hidden[text_slots], k, 2, 3
        )
        assert dart.indices.tolist() == expected


@torch.no_grad()
def test_text_only_prompts_mix_with_in_llm_contexts(tiny):
    """A prompt without images gets no selection; its batch mates still drop theirs, decoding as re-forwards."""
    adapter, processor, patch = tiny
    items = [*_items(patch)[:2], PromptItem("text", [], "no image here, just words", "sys", "think")]
    samples = encode_samples(adapter, processor, items)
    selections = select_in_llm(adapter, samples, "dart", 0.3, PRUNERS_UNDER_TEST["dart"], 2)
    assert selections[2] == [] and all(len(sel) == 1 for sel in selections[:2])
    sampling = SamplingConfig(4, False, 1.0, 1.0, 0, [], honour_stops=False)
    engine = DecodeEngine(adapter, processor.tokenizer, default_engine())
    cached = engine.generate(pruned_prompts(adapter, samples, selections), sampling, slots=3)
    produced = [torch.zeros(0, dtype=torch.long) for _ in samples]
    for _ in range(4):
        ctx = build_context(adapter, samples, selections, produced)
        nxt = adapter.logits(adapter.run_llm(ctx.inputs, None)[:, -1]).argmax(-1)
        produced = [torch.cat([p, n[None]]) for p, n in zip(produced, nxt, strict=True)]
    assert [g.token_ids.tolist() for g in cached] == [p.tolist() for p in produced]


def test_each_entry_point_refuses_the_other_stage(tiny):
    adapter, processor, patch = tiny
    sample = encode_samples(adapter, processor, _items(patch)[1:2])[0]
    with pytest.raises(ValueError, match="pruner 'fastv' prunes inside the LLM"):
        select_tokens("fastv", sample.images[0], sample.question_embeds, 0.5, torch.Generator(), {})
    with pytest.raises(ValueError, match="pruner 'random' is a pre-LLM operator"):
        select_in_llm(adapter, [sample], "random", 0.5, {}, 2)
    with pytest.raises(ValueError, match=r"pruner.layer=4 must lie in \[1, 3\]"):
        select_in_llm(adapter, [sample], "fastv", 0.5, {}, 4)


@pytest.mark.parametrize("name", sorted(PRUNERS_UNDER_TEST))
@torch.no_grad()
def test_fused_prefill_selection_equals_the_separate_pass(tiny, name):
    """Choosing on the prefill's way through layer K-1 keeps what ``select_in_llm`` keeps, with the same logits
    and the same greedy decoding (slots refilled, a text-only prompt in the batch)."""
    adapter, processor, patch = tiny
    items = [*_items(patch), PromptItem("text", [], "no image here, just words", "sys", "think")]
    samples = encode_samples(adapter, processor, items)
    params = PRUNERS_UNDER_TEST[name]
    selections = select_in_llm(adapter, samples, name, 0.3, params, 2)
    fused = fused_prompts(adapter, samples, name, 0.3, params, 2)
    ctx = fused.build(range(len(samples)))
    assert ctx.inputs.late.keep is None
    hidden = adapter.run_llm(ctx.inputs, None)
    separate = build_context(adapter, samples, selections)
    assert torch.equal(ctx.inputs.late.keep, separate.inputs.late.keep)
    assert ctx.kept_visual.tolist() == separate.kept_visual.tolist()
    real = separate.inputs.late.keep
    reference = adapter.run_llm(separate.inputs, None)
    torch.testing.assert_close(adapter.logits(hidden[real]), adapter.logits(reference[real]), atol=1e-5, rtol=0)
    sampling = SamplingConfig(6, False, 1.0, 1.0, 0, [], honour_stops=False)
    engine = DecodeEngine(adapter, processor.tokenizer, default_engine())
    one_pass = engine.generate(fused_prompts(adapter, samples, name, 0.3, params, 2), sampling, slots=2)
    two_pass = engine.generate(pruned_prompts(adapter, samples, selections), sampling, slots=2)
    assert [g.token_ids.tolist() for g in one_pass] == [g.token_ids.tolist() for g in two_pass]
