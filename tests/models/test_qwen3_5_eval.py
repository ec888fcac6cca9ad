"""Greedy evaluation end to end (``sparsectx.eval.runner.run``, what ``src/evaluate.py`` calls) on a tiny Qwen3.5
checkpoint loaded through ``model.path``: a pre-LLM pruner writes a complete result; an in-LLM one is the config
error naming ``pruner.stage`` and writes nothing."""

from __future__ import annotations

import json

import pytest
from eval.test_runner_support import SIDE, base_overrides, compose_eval, write_bench
from qwen3_5_models import PATCH, tiny_qwen3_5
from tiny_models import char_processor

from sparsectx.eval.runner import run


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """Returns a directory holding a saved tiny hybrid Qwen3.5 and its processor files."""
    path = tmp_path_factory.mktemp("qwen3_5_eval") / "model"
    processor = char_processor(PATCH, path)
    tiny_qwen3_5(processor.tokenizer, seed=0).save_pretrained(path)
    return path


def _overrides(model_dir, tmp_path) -> list[str]:  # noqa: ANN001
    benches = {"syn_mcq": write_bench(tmp_path / "syn_mcq.tsv", "syn_mcq", 3, SIDE)}
    return ["bench=syn_mcq", *base_overrides(model_dir, tmp_path / "results", benches, 6), "budget=0.25"]


def test_evaluation_with_a_pre_llm_pruner_writes_complete_results(model_dir, tmp_path) -> None:
    (out,) = run(compose_eval([*_overrides(model_dir, tmp_path), "pruner=cdpruner"]))
    result = json.loads(out.read_text())
    assert out.name == "syn_mcq.json" and result["n_rows"] == result["n_scored"] == 3
    assert (result["pruner"], result["budget"], result["skipped"], result["n_failed"]) == (
        "cdpruner",
        0.25,
        [],
        0,
    )


def test_evaluation_with_an_in_llm_pruner_is_a_config_error(model_dir, tmp_path) -> None:
    with pytest.raises(ValueError, match=r"pruner\.stage=llm \(pruner\.layer=2\) is not supported on .*'qwen3_5'"):
        run(compose_eval([*_overrides(model_dir, tmp_path), "pruner=fastv"]))
    assert not list((tmp_path / "results").rglob("*.json"))
