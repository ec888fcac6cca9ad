"""Greedy evaluation end to end (``sparsectx.eval.runner.run``, what ``src/evaluate.py`` calls) on tiny GLM-4.6V
and LLaVA-OneVision checkpoints loaded through ``model.path``."""

from __future__ import annotations

import json

import pytest
from eval.test_runner_support import SIDE, base_overrides, compose_eval, write_bench
from family_models import family_model

from sparsectx.eval.runner import run

FAMILY_OVERRIDES = {"glm46v": [], "llava_onevision": ["model.tile_budget=pooled"]}


@pytest.mark.parametrize("family", sorted(FAMILY_OVERRIDES))
@pytest.mark.parametrize("pruner", ["cdpruner", "fastv"])
def test_evaluation_writes_complete_results(family: str, pruner: str, tmp_path) -> None:  # noqa: ANN001
    model, _ = family_model(family, tmp_path / "model", layers=3)
    model.save_pretrained(tmp_path / "model")
    benches = {"syn_mcq": write_bench(tmp_path / "syn_mcq.tsv", "syn_mcq", 3, SIDE)}
    overrides = [
        *base_overrides(tmp_path / "model", tmp_path / "results", benches, 6),
        *FAMILY_OVERRIDES[family],
    ]
    (out,) = run(compose_eval(["bench=syn_mcq", *overrides, f"pruner={pruner}", "budget=0.25"]))
    result = json.loads(out.read_text())
    assert out.name == "syn_mcq.json" and result["n_rows"] == result["n_scored"] == 3
    assert (result["pruner"], result["budget"], result["skipped"], result["n_failed"]) == (
        pruner,
        0.25,
        [],
        0,
    )
