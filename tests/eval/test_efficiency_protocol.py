"""The efficiency protocols: LT-OPD App. E.1's question selection on TextVQA's real layout, the replayed
reference (1 prefill + n - 1 teacher-forced forwards), the mean-of-means statistic, the config check, and the
ltopd mode end to end."""

from __future__ import annotations

import ast
import csv
import json
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch
from engine_setup import default_engine
from tiny_models import noise_image
from transformers import AutoTokenizer, DynamicCache

from sparsectx.context import build_context
from sparsectx.encoding import encode_samples
from sparsectx.engine import DecodeEngine, pruned_prompts
from sparsectx.engine.step import DecodeStep
from sparsectx.eval.config import compose_bench, load_eval_config
from sparsectx.eval.efficiency_protocol import (
    most_frequent_answer,
    normalize_answer,
    reference_ids,
    select_questions,
    summarize,
)
from sparsectx.eval.protocol import load_bench_items, select_visual
from sparsectx.eval.runner import run
from sparsectx.models import resolve_model_path
from sparsectx.models.adapter import LLMInputs
from sparsectx.prompting import PromptItem
from sparsectx.pruning.config import PrunerConfig

from .test_runner_support import base_overrides, build_model_dir, compose_eval
from .vlmeval_cases import png_b64, write_tsv

# TextVQA_VAL.tsv's layout (sparsectx/rehearsal/benchmarks/vqa.py): index, image, question, answer = a Python list of
# the ten annotators' answers; a photo asked twice holds the first row's index in its image cell.
ANSWERS = [
    ["a bottle of coca cola"] * 6 + ["coca cola", "Coca Cola", "coke", "unanswerable"],  # long majority
    ["stop"] * 7 + ["stop sign on the corner of the street"] * 3,  # short majority, long minority
    ["Coca  Cola"] * 3 + ["coca cola"] * 3 + ["pepsi"] * 4,  # normalising merges the 3 + 3: "coca cola" wins
    ["new york city hall"] * 5 + ["nyc"] * 5,  # tie: the first given wins (long)
    ["nyc"] * 5 + ["new york city hall"] * 5,  # the same tie the other way (short)
    ["  The   Old  Mill  Road  "] * 4 + ["mill road"] * 2 + ["x"] * 4,  # whitespace runs and case
    ["5:00"] * 10,
]


def _textvqa_file(path: Path) -> Path:
    rows = [
        {
            "index": str(34602 + i),
            "image": png_b64(40 + i) if i != 5 else "34605",  # row 5 asks about row 3's photo
            "question": f"What does the sign say? ({i})",
            "answer": str(golds),
        }
        for i, golds in enumerate(ANSWERS)
    ]
    return write_tsv(path, rows)


def _independent_selection(path: Path, tokenizer, min_tokens: int) -> list[int]:
    """The rule restated without the library: read the TSV, normalise, count, first-given tie, tokenize."""
    out = []
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            answers = [" ".join(a.lower().split()) for a in ast.literal_eval(row["answer"])]
            best, best_count = None, 0
            for answer in answers:  # the first answer to reach the highest count, in the order given
                count = answers.count(answer)
                if count > best_count:
                    best, best_count = answer, count
            if len(tokenizer.encode(best, add_special_tokens=False)) >= min_tokens:
                out.append(int(row["index"]))
    return out


@pytest.fixture(scope="module")
def tiny_tokenizer():
    """The shipped tiny model's own tokenizer (the miniature's stand-in for Qwen's)."""
    return AutoTokenizer.from_pretrained(resolve_model_path("package:tiny-vlm"))


def test_normalize_and_most_frequent_answer_with_the_first_given_tie_rule():
    assert normalize_answer("  The\tOld \n Mill  ") == "the old mill"
    assert most_frequent_answer(["b", "a", "a", "b"]) == "b"  # tie: the first given
    assert most_frequent_answer(["a", "b", "b", "a"]) == "a"
    assert most_frequent_answer(["Coca  Cola", "coca cola", "pepsi"]) == "coca cola"  # merged by normalising
    with pytest.raises(ValueError, match="no human answers"):
        most_frequent_answer([])


@pytest.mark.parametrize("min_tokens", [3, 6, 9])
def test_selection_on_textvqas_real_layout_matches_an_independent_reading(tmp_path, tiny_tokenizer, min_tokens):
    path = _textvqa_file(tmp_path / "TextVQA_VAL.tsv")
    spec = compose_bench("textvqa", [f"bench.textvqa.path={path}"])
    items = load_bench_items(spec, 0.0).items
    assert len(items) == len(ANSWERS)  # nothing dropped: the shared-image row resolves
    chosen = [item.index for item in select_questions(items, spec, tiny_tokenizer, min_tokens)]
    assert chosen == _independent_selection(path, tiny_tokenizer, min_tokens)


def test_selection_keeps_long_majorities_only(tmp_path, tiny_tokenizer):
    path = _textvqa_file(tmp_path / "TextVQA_VAL.tsv")
    spec = compose_bench("textvqa", [f"bench.textvqa.path={path}"])
    chosen = [item.index for item in select_questions(load_bench_items(spec, 0.0).items, spec, tiny_tokenizer, 6)]
    # 34602: "a bottle of coca cola"; 34604: "coca cola" (merged 6 beats pepsi's 4); 34605: the tie's first,
    # "new york city hall"; 34607: "the old mill road". Not: "stop", the reversed tie's "nyc", "5:00".
    assert chosen == [34602, 34604, 34605, 34607]


def test_reference_ids_repeat_the_answer_to_the_length(tiny_tokenizer):
    ids = tiny_tokenizer.encode("coca cola", add_special_tokens=False)
    ref = reference_ids(tiny_tokenizer, "coca cola", 128)
    assert len(ref) == 128 and ref[: len(ids)] == ids
    assert all(ref[i] == ids[i % len(ids)] for i in range(128))


def test_mean_of_means_and_median_statistics_match_an_independent_computation():
    reps = [[1.0, 2.0, 9.0], [10.0], [4.0, 4.0, 7.0, 1.0]]  # unequal counts: pooled mean differs
    expected_mean = np.mean([np.mean(r) for r in reps])
    expected_median = np.mean([np.median(r) for r in reps])
    assert summarize(reps, "ltopd") == pytest.approx(expected_mean)
    assert summarize(reps, "quick") == pytest.approx(expected_median)
    assert summarize(reps, "ltopd") != pytest.approx(np.mean([x for r in reps for x in r]))
    assert summarize(reps, "ltopd") != pytest.approx(summarize(reps, "quick"))


def _teacher_forced(adapter, ctx, reference: list[int]) -> list[int]:
    """The oracle: a DynamicCache, the prefill, then each reference token fed in turn; greedy choice per step."""
    cache = DynamicCache(config=adapter.model.config.get_text_config())
    logits = adapter.logits(adapter.run_llm(ctx.inputs, cache)[:, -1])
    mask, positions = ctx.inputs.attention_mask, ctx.next_position.clone()
    chosen = [int(logits.argmax(-1))]
    for token in reference[:-1]:
        mask = torch.cat([mask, mask.new_ones(1, 1)], dim=1)
        embeds = adapter.embed_ids(torch.tensor([[token]]))
        visual = torch.zeros(1, 1, dtype=torch.bool)
        step = LLMInputs(embeds, mask, positions[None, :, None].expand(3, -1, 1), visual, ())
        logits = adapter.logits(adapter.run_llm(step, cache)[:, -1])
        positions = positions + 1
        chosen.append(int(logits.argmax(-1)))
    return chosen


@torch.no_grad()
def test_replay_runs_127_incremental_forwards_for_128_tokens_and_teacher_forces(tiny_vlm, monkeypatch):
    adapter, processor = tiny_vlm.adapter, tiny_vlm.processor
    item = PromptItem("q", [noise_image(tiny_vlm.patch * 4, tiny_vlm.patch * 6, 3)], "what?", "sys", "go")
    samples = encode_samples(adapter, processor, [item])
    selections = select_visual(adapter, samples, PrunerConfig("random", "pre_llm", {}), 0.25, 0, "t")
    reference = [int(t) for t in torch.randint(0, adapter.model.config.get_text_config().vocab_size, (128,))]
    steps = []
    real_run = DecodeStep.run
    monkeypatch.setattr(DecodeStep, "run", lambda self: (steps.append(1), real_run(self))[1])
    engine = DecodeEngine(adapter, processor.tokenizer, default_engine())
    _, _, chosen = engine.time_replay(pruned_prompts(adapter, samples, selections), torch.tensor(reference))
    assert len(steps) == 127
    assert chosen.tolist() == _teacher_forced(adapter, build_context(adapter, samples, selections), reference)


def test_an_unknown_protocol_is_a_config_error_naming_the_choices():
    cfg = compose_eval(["mode=efficiency", "efficiency.protocol=paper"])
    with pytest.raises(ValueError, match=r"efficiency\.protocol='paper' is not one of \['ltopd', 'quick'\]"):
        load_eval_config(cfg)


def test_ltopd_mode_end_to_end_on_textvqas_layout(tmp_path: Path):
    model_dir = build_model_dir(tmp_path / "config_only", "qwen2_5_vl", weights=False)
    path = _textvqa_file(tmp_path / "TextVQA_VAL.tsv")
    overrides = [
        "bench=textvqa",
        "mode=efficiency",
        "efficiency.bench=textvqa",
        "efficiency.protocol=ltopd",
        "efficiency.budgets=[0.25]",
        "efficiency.num_items=null",
        "efficiency.min_answer_tokens=15",
        "efficiency.repetitions=3",
        "efficiency.warmup=1",
        "efficiency.decode_tokens=6",
    ]
    out = run(compose_eval([*overrides, *base_overrides(model_dir, tmp_path / "results", {"textvqa": path}, 4)]))[0]
    payload = json.loads(out.read_text())
    # the character-level test tokenizer: "a bottle of coca cola" (21), "new york city hall" (18),
    # "the old mill road" (17) reach 15 tokens; "coca cola" (9) does not
    assert payload["protocol"] == "ltopd" and payload["decoding"] == "replayed reference"
    assert payload["selection"]["candidates"] == 7
    assert (payload["selection"]["selected"], payload["selection"]["selected_images"]) == (3, 2)  # one shared
    assert payload["num_items"] == payload["selection"]["measured"] == 3
    assert (payload["repetitions"], payload["decode_tokens"], payload["decode_forwards"]) == (3, 6, 5)
    stages = {"transfer", "vision", "selection", "prefill", "decode", "text"}
    for row in payload["budgets"]:
        assert set(row["repetitions_ms"]) == stages and set(row["latency_ms"]) == stages | {"total"}
        for stage, per_item in row["repetitions_ms"].items():
            assert [len(reps) for reps in per_item] == [3, 3, 3]
            assert row["latency_ms"][stage] == pytest.approx(statistics.fmean(np.mean(r) for r in per_item))
        assert row["latency_ms"]["total"] == pytest.approx(sum(row["latency_ms"][s] for s in stages))
