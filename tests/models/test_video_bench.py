"""Greedy evaluation of the synthetic video benchmark end to end (``sparsectx.eval.runner.run``, what
``src/evaluate.py`` calls), on tiny random-weight checkpoints of every video-capable family; Pass@K and the
efficiency mode on the same videos (the tower's FLOPs formula against ``FlopCounterMode``'s tally).

``conf/bench/tiny_video.yaml`` reads the family's TSV (frames embedded); pruning keeps k per video. A
checkpoint family without a video path is a config error naming ``bench.tiny_video.video``; a row with
fewer frames than the benchmark asks for is a named, counted skip.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from eval.test_runner_support import base_overrides, compose_eval
from family_models import family_model
from omegaconf import OmegaConf
from transformers import AutoConfig
from video_setup import BUILDERS, video_family

from sparsectx.budget import tokens_to_keep
from sparsectx.data import load_suite_config
from sparsectx.data.tsv import read_tsv, write_tsv
from sparsectx.data.video import VideoSource, row_video
from sparsectx.data.video_family import build_video_bench, load_video_family_config, video_items
from sparsectx.eval.costs import counted_flops, vision_flops
from sparsectx.eval.runner import run
from sparsectx.io import append_jsonl, read_jsonl
from sparsectx.prompting import PromptItem, processor_inputs

CONF = Path(__file__).resolve().parents[2] / "conf"
ROWS = 3


def _video_bench(out_dir: Path) -> Path:
    suite = load_suite_config(OmegaConf.load(CONF / "data" / "tiny.yaml"))
    family = load_video_family_config(OmegaConf.load(CONF / "data" / "video" / "tiny_video.yaml"))
    return build_video_bench(replace(suite, out_dir=str(out_dir)), replace(family, size=ROWS))


def _model_dir(family: str, directory: Path, layers: int = 2) -> Path:
    tiny = video_family(family, directory, layers=layers)
    tiny.adapter.model.save_pretrained(directory)
    tiny.processor.tokenizer.save_pretrained(directory)  # keeps the video-part chat template
    return directory


def _overrides(model_dir: Path, tmp: Path, bench: Path) -> list[str]:
    cap = "bench.tiny_video.video.max_tokens=64"  # 16 merged tokens per temporal patch: CPU-sized
    return ["bench=tiny_video", *base_overrides(model_dir, tmp / "results", {"tiny_video": bench}, 4), cap]


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_video_benchmark_evaluates_with_pruning(family: str, tmp_path: Path) -> None:
    bench = _video_bench(tmp_path / "data")
    # Qwen3.5's every fourth layer is full attention: 4 layers hold one, as the real checkpoints do (an
    # all-linear decoder has no attention cache, and HF's own DynamicCache cannot measure its length).
    model_dir = _model_dir(family, tmp_path / "model", layers=4 if family == "qwen3_5" else 2)
    cfg = compose_eval([*_overrides(model_dir, tmp_path, bench), "pruner=divprune", "budget=0.1"])
    (out,) = run(cfg)
    result = json.loads(out.read_text())
    assert result["n_rows"] == result["n_scored"] == ROWS and result["skipped"] == []
    rows = [json.loads(line) for line in out.with_suffix(".predictions.jsonl").read_text().splitlines()]
    # 8 frames -> 4 temporal patches of 4 x 4 merged tokens under the 64-token cap: k = round(0.1 * 64)
    assert [row["kept_visual"] for row in rows] == [tokens_to_keep(0.1, 64)] * ROWS
    assert all(row["status"] != "error" for row in rows)


@pytest.mark.parametrize("pruner", ["fastv", "dart"])
def test_in_llm_pruners_keep_k_of_each_video_after_layer_k(pruner: str, tmp_path: Path) -> None:
    bench = _video_bench(tmp_path / "data")
    model_dir = _model_dir("qwen2_5_vl", tmp_path / "model", layers=3)
    (out,) = run(compose_eval([*_overrides(model_dir, tmp_path, bench), f"pruner={pruner}", "budget=0.25"]))
    rows = [json.loads(line) for line in out.with_suffix(".predictions.jsonl").read_text().splitlines()]
    assert [row["kept_visual"] for row in rows] == [tokens_to_keep(0.25, 64)] * ROWS
    assert all(row["status"] != "error" for row in rows)


def test_short_clips_are_counted_skips_and_other_families_refuse(tmp_path: Path) -> None:
    bench = _video_bench(tmp_path / "data")
    suite = load_suite_config(OmegaConf.load(CONF / "data" / "tiny.yaml"))
    family = replace(load_video_family_config(OmegaConf.load(CONF / "data" / "video" / "tiny_video.yaml")), size=ROWS)
    items = video_items(suite, family)
    items[1] = replace(items[1], frames=items[1].frames[:5])
    write_tsv(bench, items)
    model_dir = _model_dir("qwen2_5_vl", tmp_path / "model")
    overrides = [
        *_overrides(model_dir, tmp_path, bench),
        "pruner=random",
        "budget=0.5",
        "max_skip_fraction=0.5",
    ]
    (out,) = run(compose_eval(overrides))
    result = json.loads(out.read_text())
    assert result["n_rows"] == ROWS and result["n_scored"] == ROWS - 1
    assert len(result["skipped"]) == 1 and "5 frames, fewer than the 8 requested" in json.dumps(result["skipped"])

    llava, _ = family_model("llava_onevision", tmp_path / "llava")
    llava.save_pretrained(tmp_path / "llava")
    fresh = _video_bench(tmp_path / "fresh")
    overrides = [*_overrides(tmp_path / "llava", tmp_path / "llava_results", fresh), "pruner=random"]
    cfg = compose_eval([*overrides, "model.tile_budget=pooled"])
    with pytest.raises(
        ValueError, match=r"bench\.tiny_video\.video: model family 'llava_onevision' has no video input"
    ):
        run(cfg)


def test_passk_draws_from_a_pruned_video_context(tmp_path: Path) -> None:
    bench = _video_bench(tmp_path / "data")
    model_dir = _model_dir("qwen2_5_vl", tmp_path / "model")
    full = tmp_path / "full"
    append_jsonl(full / "tiny_video.predictions.jsonl", [{"id": str(i), "correct": True} for i in range(ROWS)])
    passk = ["mode=passk", "passk.n=2", "passk.sample_batch=2", "passk.max_new_tokens=3", "passk.hit_m=[1]"]
    overrides = [*_overrides(model_dir, tmp_path, bench), "pruner=random", "budget=0.25", *passk]
    (out,) = run(compose_eval([*overrides, f"passk.full_context_leaf={full}"]))
    draws = read_jsonl(out.with_name("tiny_video.passk.samples.jsonl"))
    sparse = [d for d in draws if d["condition"] == "sparse"]
    # One video of 64 tokens per item: one selection of k = round(0.25 * 64) of them.
    assert len(sparse) == ROWS and all(
        [len(kept) for kept in d["kept_indices"]] == [tokens_to_keep(0.25, 64)] for d in sparse
    )
    blind = [d for d in draws if d["condition"] == "no_image"]
    assert all(d["kept_indices"] == [] for d in blind)


@torch.no_grad()
def test_efficiency_counts_the_video_tower_and_keeps_k_of_the_video(tmp_path: Path) -> None:
    bench = _video_bench(tmp_path / "data")
    model_dir = _model_dir("qwen2_5_vl", tmp_path / "model")
    efficiency = [
        "mode=efficiency",
        "efficiency.bench=tiny_video",
        "efficiency.budgets=[0.25]",
        "efficiency.num_items=1",
        "efficiency.repetitions=1",
        "efficiency.warmup=0",
        "efficiency.decode_tokens=2",
    ]
    (out,) = run(compose_eval([*_overrides(model_dir, tmp_path, bench), "pruner=random", *efficiency]))
    full, pruned = json.loads(out.read_text())["budgets"]
    assert (full["kept_visual"], pruned["kept_visual"]) == (64, tokens_to_keep(0.25, 64))
    assert 0 < pruned["ratios"]["prefill_flops"] < 1
    # The formula's vision FLOPs are the tower's own tally on the same clip (FlopCounterMode).
    tiny = video_family("qwen2_5_vl", tmp_path / "again")
    items, _ = read_tsv(bench)
    source = VideoSource(bench, Path("."), "", 8, 64, 2.0)
    prompt = PromptItem("0", [], "q", "s", "", videos=[row_video(items[0], source)])
    batch = processor_inputs(tiny.processor, [prompt])
    grid = batch["video_grid_thw"]
    counted = counted_flops(lambda: tiny.adapter.model.model.visual(batch["pixel_values_videos"], grid_thw=grid))
    vision = tiny.adapter.model.config.vision_config
    assert vision_flops(vision, "qwen2_5_vl", [tuple(grid[0].tolist())]) == pytest.approx(counted, rel=1e-6)
    assert full["flops"]["vision"] == pytest.approx(
        vision_flops(AutoConfig.from_pretrained(model_dir).vision_config, "qwen2_5_vl", [tuple(grid[0].tolist())])
    )
