"""HiPrune and ZOO-Prune run wherever the other pre-LLM operators do: evaluation, Pass@K, the efficiency mode
and training, through the same entry points, the jobs setting the pruner's declared signals on the adapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from eval.test_runner_support import SIDE, base_overrides, build_model_dir, compose_eval, write_bench
from training.test_loop_support import make_trainer, shared_env

from sparsectx.budget import tokens_to_keep
from sparsectx.eval.runner import run
from sparsectx.io import append_jsonl, read_jsonl
from sparsectx.pruning import declared_signals
from sparsectx.training.loop import train_step

OVERRIDES = {"hiprune": ["pruner.params.alpha=1.0"], "zoo_prune": ["pruner.params.probes=4"]}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("model"), "qwen2_5_vl", weights=True)


def _eval(model_dir: Path, tmp: Path, pruner: str, *extra: str):
    bench = {"syn_count": write_bench(tmp / "syn_count.tsv", "syn_count", 3, SIDE)}
    overrides = [f"pruner={pruner}", *OVERRIDES[pruner], "budget=0.25", "bench=syn_count"]
    return compose_eval([*overrides, *base_overrides(model_dir, tmp / "results", bench, 4), *extra])


@pytest.mark.parametrize("pruner", sorted(OVERRIDES))
def test_evaluation_keeps_k_per_image(model_dir, tmp_path, pruner):
    out = run(_eval(model_dir, tmp_path, pruner))[0]
    result = json.loads(out.read_text())
    assert (result["pruner"], result["n_scored"]) == (pruner, 3)
    assert result["mean_kept_visual"] == 4  # round(0.25 * 16) per image


@pytest.mark.parametrize("pruner", sorted(OVERRIDES))
def test_passk_draws_from_one_pruned_context(model_dir, tmp_path, pruner):
    full_leaf = tmp_path / "full"
    append_jsonl(full_leaf / "syn_count.predictions.jsonl", [{"id": str(i), "correct": True} for i in range(3)])
    passk = ["mode=passk", "passk.n=2", "passk.sample_batch=2", "passk.max_new_tokens=3", "passk.hit_m=[1]"]
    out = run(_eval(model_dir, tmp_path, pruner, *passk, f"passk.full_context_leaf={full_leaf}"))[0]
    sparse = [d for d in read_jsonl(out.with_name("syn_count.passk.samples.jsonl")) if d["condition"] == "sparse"]
    assert sparse and all(len(d["kept_indices"][0]) == 4 for d in sparse)


@pytest.mark.parametrize("pruner", sorted(OVERRIDES))
def test_efficiency_mode_counts_the_pruned_prefill(tmp_path, pruner):
    model_dir = build_model_dir(tmp_path / "config_only", "qwen2_5_vl", weights=False)
    efficiency = [
        "mode=efficiency",
        "efficiency.bench=syn_count",
        "efficiency.budgets=[0.25]",
        "efficiency.num_items=1",
        "efficiency.repetitions=1",
        "efficiency.warmup=0",
        "efficiency.decode_tokens=2",
    ]
    out = run(_eval(model_dir, tmp_path, pruner, *efficiency))[0]
    full, pruned = json.loads(out.read_text())["budgets"]
    assert (full["kept_visual"], pruned["kept_visual"]) == (16, 4)
    assert 0 < pruned["ratios"]["prefill_flops"] < 1


@pytest.mark.parametrize("pruner", sorted(OVERRIDES))
def test_training_step_uses_the_declared_signals(tmp_path_factory, tmp_path, pruner):
    env = shared_env(tmp_path_factory)
    trainer = make_trainer(env, tmp_path, "method=scopd", f"pruner={pruner}", *OVERRIDES[pruner])
    cfg = trainer.cfg
    assert trainer.student.adapter.vision_signals == declared_signals(pruner, cfg.pruner.params, cfg.seed)
    metrics, micro, budget = train_step(trainer)
    assert torch.isfinite(torch.tensor(metrics["train/loss"])) and metrics["train/grad_norm"] > 0
    for mb in micro:
        for sample, selections in zip(mb.encoded, mb.selections, strict=True):
            for image, selection in zip(sample.images, selections, strict=True):
                assert selection.indices.numel() == tokens_to_keep(budget, image.num_tokens)


@pytest.mark.parametrize(
    "pruner, bad, pattern",
    [
        ("hiprune", "pruner.params.alpha=1.5", r"pruner\.params\.alpha=1\.5 is outside \[0, 1\]"),
        ("zoo_prune", "pruner.params.probes=0", r"pruner\.params\.probes=0 must be an integer >= 1"),
        ("zoo_prune", "pruner.params.step=-0.01", r"pruner\.params\.step=-0\.01 must be a finite number > 0"),
    ],
)
def test_bad_params_fail_before_any_model_loads(model_dir, tmp_path, monkeypatch, pruner, bad, pattern):
    def no_model(*_args):
        raise AssertionError("a config error must come before the model loads")

    monkeypatch.setattr("sparsectx.eval.runner.load_eval_model", no_model)
    with pytest.raises(ValueError, match=pattern):
        run(_eval(model_dir, tmp_path, pruner, bad))
