"""The decode engine gives the reference loop's greedy tokens, stop positions and texts (fp32, CPU).

Batches mix prompt lengths (several image sizes, text-only prompts), kept counts (random pruning at several
budgets) and stop positions (stop strings built from what the model actually generates), with fewer slots
than prompts so finished slots are refilled mid-run; both Qwen-VL families.
"""

from __future__ import annotations

import pytest
import torch
from engine_setup import default_engine
from generation_oracle import reference_generate
from tiny_models import noise_image

from sparsectx.context import build_context
from sparsectx.encoding import encode_samples
from sparsectx.engine import DecodeEngine, Prompts, pruned_prompts
from sparsectx.engine.decode import prefill_groups
from sparsectx.generation import SamplingConfig
from sparsectx.prompting import PromptItem
from sparsectx.pruning import select_tokens


def _items(patch: int) -> list[PromptItem]:
    sizes = [(8, 6), (4, 4), (6, 8), (10, 4), (4, 6), (6, 6), (8, 8)]
    items = [
        PromptItem(f"img{i}", [noise_image(patch * w, patch * h, i)], "what is it?" * (1 + i % 3), "sys", "go")
        for i, (w, h) in enumerate(sizes)
    ]
    pair = [noise_image(patch * 4, patch * 6, 9), noise_image(patch * 6, patch * 4, 10)]
    items.append(PromptItem("two", pair, "same?", "s", ""))
    items.append(PromptItem("text", [], "no image here, just words", "sys", "think"))
    return items


def _contexts(tiny_vlm, seed: int = 1):
    adapter = tiny_vlm.adapter
    samples = encode_samples(adapter, tiny_vlm.processor, _items(tiny_vlm.patch))
    gen = torch.Generator().manual_seed(seed)
    budgets = [0.1, 0.25, 0.5, 1.0]
    selections = [
        [select_tokens("random", im, s.question_embeds, budgets[i % 4], gen, {}) for im in s.images]
        for i, s in enumerate(samples)
    ]
    return adapter, samples, selections


def _sampling(cap: int, stops: list[str]) -> SamplingConfig:
    return SamplingConfig(cap, False, 1.0, 1.0, 0, stops)


def _oracle(adapter, tok, samples, selections, sampling):
    """The reference loop, one prompt at a time (no padding; the engine's slots hold no padding either)."""
    return [
        reference_generate(adapter, tok, build_context(adapter, [s], [sel]), sampling, None)[0]
        for s, sel in zip(samples, selections, strict=True)
    ]


def _stop_strings(reference) -> list[str]:
    """Returns stop strings that occur in some reference outputs but not others, at different places."""
    texts = [gen.text for gen in reference]
    bigrams = sorted({t[i : i + 2] for t in texts for i in range(len(t) - 1)})
    rare = [b for b in bigrams if 0 < sum(b in t for t in texts) <= len(texts) // 3]
    return rare[:: max(1, len(rare) // 3)][:3]


@pytest.mark.parametrize("slots", [3, 9])
@torch.no_grad()
def test_greedy_equals_reference_loop_with_refills(tiny_vlm, slots):
    adapter, samples, selections = _contexts(tiny_vlm)
    tok = tiny_vlm.processor.tokenizer
    free_run = _oracle(adapter, tok, samples, selections, _sampling(20, []))
    stops = _stop_strings(free_run)
    assert stops, "the tiny model generated too little text to take stop strings from"
    sampling = _sampling(20, stops)
    reference = _oracle(adapter, tok, samples, selections, sampling)
    assert len({g.token_ids.numel() for g in reference}) > 2, "stop positions should differ between samples"
    assert any(g.stopped for g in reference) and any(not g.stopped for g in reference)
    engine = DecodeEngine(adapter, tok, default_engine(sync_every=3))
    finished = []
    ours = engine.generate(
        pruned_prompts(adapter, samples, selections),
        sampling,
        slots=slots,
        on_finish=lambda i, g: finished.append(i),
    )
    assert sorted(finished) == list(range(len(samples)))
    for ref, got in zip(reference, ours, strict=True):
        assert got.token_ids.tolist() == ref.token_ids.tolist()
        assert got.text == ref.text
        assert got.stopped == ref.stopped


@torch.no_grad()
def test_engine_equals_batched_reference_loop(tiny_vlm):
    """The reference loop on the whole left-padded batch (its usual use) gives the same tokens too."""
    adapter, samples, selections = _contexts(tiny_vlm, seed=4)
    tok = tiny_vlm.processor.tokenizer
    sampling = _sampling(12, [])
    reference = reference_generate(adapter, tok, build_context(adapter, samples, selections), sampling, None)
    ours = DecodeEngine(adapter, tok, default_engine()).generate(pruned_prompts(adapter, samples, selections), sampling)
    assert [g.token_ids.tolist() for g in ours] == [g.token_ids.tolist() for g in reference]


@torch.no_grad()
def test_end_token_stops_and_cap_truncates(tiny_vlm):
    """A prompt whose next greedy token is made an end token stops at once; the others run to the cap."""
    adapter, samples, selections = _contexts(tiny_vlm, seed=2)
    tok = tiny_vlm.processor.tokenizer
    reference = _oracle(adapter, tok, samples, selections, _sampling(6, []))
    first = reference[0].token_ids[2].item()
    stops = [tok.decode([first])]
    sampling = _sampling(6, stops)
    expected = _oracle(adapter, tok, samples, selections, sampling)
    ours = DecodeEngine(adapter, tok, default_engine(sync_every=5)).generate(
        pruned_prompts(adapter, samples, selections), sampling, slots=4
    )
    assert [g.token_ids.tolist() for g in ours] == [g.token_ids.tolist() for g in expected]
    assert [g.stopped for g in ours] == [g.stopped for g in expected]
    assert ours[0].stopped and ours[0].token_ids.numel() <= 3
    assert all(g.token_ids.numel() == 6 for g in ours if not g.stopped)


@torch.no_grad()
def test_seeded_sampling_is_reproducible(tiny_vlm):
    adapter, samples, selections = _contexts(tiny_vlm, seed=3)
    tok = tiny_vlm.processor.tokenizer
    sampling = SamplingConfig(10, True, 0.9, 0.95, 20, [])
    engine = DecodeEngine(adapter, tok, default_engine())
    prompts = pruned_prompts(adapter, samples, selections)
    runs = [engine.generate(prompts, sampling, torch.Generator().manual_seed(7), slots=4) for _ in range(2)]
    other = engine.generate(prompts, sampling, torch.Generator().manual_seed(8), slots=4)
    assert [g.token_ids.tolist() for g in runs[0]] == [g.token_ids.tolist() for g in runs[1]]
    assert [g.token_ids.tolist() for g in runs[0]] != [g.token_ids.tolist() for g in other]


@torch.no_grad()
def test_shared_contexts_prefill_once_and_decode_as_copies(tiny_vlm):
    """Prompts.shared (Pass@K draws, a GRPO group): each refill prefills a context once for all its copies;
    greedy copies equal the reference loop, and seeded sampling from shared copies is reproducible."""
    adapter, samples, selections = _contexts(tiny_vlm, seed=5)
    tok = tiny_vlm.processor.tokenizer
    copies = 3
    rep = lambda xs: [x for x in xs for _ in range(copies)]  # noqa: E731
    reference = _oracle(adapter, tok, samples, selections, _sampling(8, []))
    plain = pruned_prompts(adapter, rep(samples), rep(selections))
    built: list[list[int]] = []

    def build(idx):
        built.append(list(idx))
        return plain.build(idx)

    keys = [i // copies for i in range(len(plain))]
    shared = Prompts(plain.lengths, build, shared=keys)
    engine = DecodeEngine(adapter, tok, default_engine(sync_every=3))
    ours = engine.generate(shared, _sampling(8, []), slots=4)
    assert [g.token_ids.tolist() for g in ours] == [g.token_ids.tolist() for g in rep(reference)]
    assert all(len({keys[i] for i in call}) == len(call) for call in built)  # one row per context per refill
    assert sum(map(len, built)) < len(plain)
    sampling = SamplingConfig(8, True, 0.9, 0.95, 20, [])
    runs = [engine.generate(shared, sampling, torch.Generator().manual_seed(11), slots=4) for _ in range(2)]
    assert [g.token_ids.tolist() for g in runs[0]] == [g.token_ids.tolist() for g in runs[1]]
    first = [g.token_ids.tolist() for g in runs[0][:copies]]
    assert len({tuple(t) for t in first}) > 1  # copies of one context still draw different samples


def test_bad_engine_settings_are_config_errors(tiny_vlm):
    adapter, samples, selections = _contexts(tiny_vlm)
    tok = tiny_vlm.processor.tokenizer
    prompts = pruned_prompts(adapter, samples, selections)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="engine.cuda_graphs=on"):
            DecodeEngine(adapter, tok, default_engine(cuda_graphs="on"))
    engine = DecodeEngine(adapter, tok, default_engine(max_slots=4, slot_buckets=[4]))
    with pytest.raises(ValueError, match=r"slots=5 .*engine.max_slots=4"):
        engine.generate(prompts, _sampling(4, []), slots=5)
    with pytest.raises(ValueError, match="engine.max_length"):
        DecodeEngine(adapter, tok, default_engine(max_length=64)).generate(prompts, _sampling(40, []))
    with pytest.raises(ValueError, match=r"stop_strings\[1\] is empty"):
        _sampling(4, ["</answer>", ""])
    with pytest.raises(ValueError, match="engine.sync_every"):
        default_engine(sync_every=0)


def test_pruned_prompts_share_only_repeated_objects(tiny_vlm):
    adapter, samples, selections = _contexts(tiny_vlm, seed=6)
    distinct = pruned_prompts(adapter, samples[:3], selections[:3])
    assert distinct.shared is None
    grouped = pruned_prompts(adapter, [samples[0]] * 2 + [samples[1]] * 2, [selections[0]] * 2 + [selections[1]] * 2)
    assert grouped.shared == [0, 0, 2, 2]
    equal_not_same = [list(selections[0]), list(selections[0])]  # equal lists of the same Selection objects
    assert pruned_prompts(adapter, [samples[0]] * 2, equal_not_same).shared == [0, 0]
    copied = [selections[0], [type(s)(s.indices.clone(), s.embeds, s.deepstack) for s in selections[0]]]
    assert pruned_prompts(adapter, [samples[0]] * 2, copied).shared is None  # other objects: never assumed equal


def test_prefill_groups_bound_the_padded_tokens_of_one_forward():
    """Runs keep the queue's order, pad to their longest prompt within the budget, and a prompt longer than
    the budget goes alone."""
    assert prefill_groups([100, 90, 80, 10], 300) == [[0, 1, 2], [3]]
    assert prefill_groups([100, 90, 80, 10], 200) == [[0, 1], [2, 3]]
    assert prefill_groups([500, 40, 30], 100) == [[0], [1, 2]]
    lengths = [1356] * 256
    groups = prefill_groups(lengths, 32768)
    assert [row for group in groups for row in group] == list(range(256))
    assert all(len(group) * 1356 <= 32768 for group in groups) and len(groups) == 11


@torch.no_grad()
def test_prefill_in_turns_equals_one_forward(tiny_vlm, monkeypatch):
    """A prefill budget below the batch's padded tokens splits each refill into several forwards (copies of one
    context included); greedy tokens equal the reference loop's."""
    adapter, samples, selections = _contexts(tiny_vlm, seed=8)
    tok = tiny_vlm.processor.tokenizer
    copies = 2
    rep = lambda xs: [x for x in xs for _ in range(copies)]  # noqa: E731
    reference = _oracle(adapter, tok, samples, selections, _sampling(8, []))
    prompts = pruned_prompts(adapter, rep(samples), rep(selections))
    forwards: list[int] = []
    real_build = prompts.build
    prompts.build = lambda idx: (forwards.append(len(idx)), real_build(idx))[1]
    budget = 2 * max(prompts.lengths)
    engine = DecodeEngine(adapter, tok, default_engine(sync_every=3, prefill_tokens=budget))
    ours = engine.generate(prompts, _sampling(8, []), slots=8)
    assert [g.token_ids.tolist() for g in ours] == [g.token_ids.tolist() for g in rep(reference)]
    assert max(forwards) <= 2 and len(forwards) > len(samples) // 2
