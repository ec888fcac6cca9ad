"""Every mode's end-of-run summary prints its numbers (issue 41, item 5): Pass@K per benchmark its greedy accuracy,
pass@k for each k and the gap; efficiency per budget its ratios to the unpruned model. Both from real runs of
``sparsectx.eval.runner.run`` on the tiny model; the greedy summary is tests/eval/test_summary.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sparsectx.engine import DecodeEngine
from sparsectx.eval.runner import format_summary, run
from sparsectx.generation import Generation
from sparsectx.io import append_jsonl

from .test_runner_support import SIDE, base_overrides, build_model_dir, compose_eval, write_bench


def test_the_passk_summary_prints_greedy_each_pass_at_k_and_the_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scripted draws: greedy wrong at the pruned context, three of four samples right, the control wrong."""

    def fake(engine, prompts, cfg, generator=None, slots=None, on_finish=None):
        size, with_image = len(prompts), bool(prompts.build(range(len(prompts))).kept_visual.sum())
        if not with_image:
            texts = ["<answer>7</answer>"] * size
        elif not cfg.do_sample:
            texts = ["<answer>5</answer>"] * size
        else:
            texts = ["<answer>5</answer>" if i == 1 else "<answer>3</answer>" for i in range(size)]
        return [Generation(torch.tensor([1]), text, True) for text in texts]

    monkeypatch.setattr(DecodeEngine, "generate", fake)
    model_dir = build_model_dir(tmp_path / "model", "qwen2_5_vl", weights=True)
    full_leaf = tmp_path / "full"  # the full-context model solved all three items: the cohort
    append_jsonl(full_leaf / "syn_count.predictions.jsonl", [{"id": str(i), "correct": True} for i in range(3)])
    bench = {"syn_count": write_bench(tmp_path / "syn_count.tsv", "syn_count", 3, SIDE)}
    overrides = ["bench=syn_count", "mode=passk", "budget=0.25", "passk.n=4", "passk.max_new_tokens=4"]
    overrides += [f"passk.full_context_leaf={full_leaf}", *base_overrides(model_dir, tmp_path / "results", bench, 4)]
    paths = run(compose_eval(overrides))
    header, row = format_summary(paths).splitlines()
    assert header.split() == ["benchmark", "cohort", "greedy", "pass@1", "pass@2", "pass@4", "gap", "(pp)", "path"]
    assert row.split() == ["syn_count", "3", "0.00", "75.00", "100.00", "100.00", "+100.00", str(paths[0])]


def test_the_efficiency_summary_prints_each_budgets_ratios(tmp_path: Path) -> None:
    model_dir = build_model_dir(tmp_path / "config_only", "qwen2_5_vl", weights=False)
    bench = {"syn_ocr": write_bench(tmp_path / "syn_ocr.tsv", "syn_ocr", 1, SIDE)}
    overrides = [
        "bench=syn_ocr",
        "mode=efficiency",
        "efficiency.bench=syn_ocr",
        "efficiency.budgets=[0.25]",
        "efficiency.num_items=1",
        "efficiency.repetitions=1",
        "efficiency.warmup=0",
        "efficiency.decode_tokens=2",
    ]
    paths = run(compose_eval([*overrides, *base_overrides(model_dir, tmp_path / "results", bench, 4)]))
    title, header, *rows, where = format_summary(paths).splitlines()
    assert title.startswith("efficiency of tiny base / visionzip on syn_ocr, 1 item timed (quick:")
    assert "ratios to budget 1" in title
    assert header.split() == [
        "budget",
        "kept",
        "prefill_flops",
        "total_flops",
        "kv_cache",
        "vision",
        "selection",
        "prefill",
        "decode",
        "total",
        "total_ms",
    ]
    payload = json.loads(paths[0].read_text())
    for line, measured in zip(rows, payload["budgets"], strict=True):
        ratios, latency = measured["ratios"], measured["ratios"]["latency"]
        shown = [ratios["prefill_flops"], ratios["total_flops"], ratios["kv_cache"]]
        shown += [latency[stage] for stage in ("vision", "selection", "prefill", "decode", "total")]
        expected = [f"{measured['budget']:g}", f"{measured['kept_visual']:g}", *(f"{v:.3f}" for v in shown)]
        assert line.split() == [*expected, f"{measured['latency_ms']['total']:.1f}"]
    assert rows[0].split()[2:10] == ["1.000"] * 8  # the unpruned model is the reference
    assert where == f"written to {paths[0]}"
