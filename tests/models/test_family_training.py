"""One SCOPD+ and one LT-OPD step on tiny GLM-4.6V and LLaVA-OneVision checkpoints, through ``model.path``.

The checkpoints are the real HF classes with tiny random weights, saved with their processors, so the
production loading path (``load_model``: family from config.json, its processor, its adapter) runs on CPU.
LoRA touches only the language model: the trainable tensors are exactly layers x modules x (A, B).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from family_models import family_model
from training.test_loop_support import TinyEnv, compose_train, make_trainer, train_overrides, training_items

from sparsectx.data import write_tsv
from sparsectx.training.loop import run

GLM_LORA = "method.lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_up_proj,down_proj]"
FAMILY_OVERRIDES = {"glm46v": [GLM_LORA], "llava_onevision": ["model.tile_budget=pooled"]}
LORA_MODULES = {"glm46v": 6, "llava_onevision": 7}  # GLM's MLP fuses gate and up into gate_up_proj


@pytest.fixture(scope="module", params=sorted(FAMILY_OVERRIDES))
def env(request, tmp_path_factory) -> tuple[str, TinyEnv]:  # noqa: ANN001
    """Returns (family, a tiny checkpoint directory and a 6-row training TSV)."""
    root = tmp_path_factory.mktemp(request.param)
    model, _ = family_model(request.param, root / "model")
    model.save_pretrained(root / "model")
    write_tsv(root / "train.tsv", training_items(6))
    return request.param, TinyEnv(root / "model", root / "train.tsv")


def _overrides(family: str, env: TinyEnv, root: Path, *extra: str) -> list[str]:
    return [*train_overrides(env, root), *FAMILY_OVERRIDES[family], *extra]


def test_lora_adapts_only_the_language_model(env, tmp_path) -> None:  # noqa: ANN001
    family, tiny = env
    trainer = make_trainer(tiny, tmp_path, *FAMILY_OVERRIDES[family], "method=scopd_plus")
    names = list(trainer.student.trainable)
    assert trainer.student.adapter.family == family
    assert len(names) == 2 * LORA_MODULES[family] * 2  # 2 decoder layers x modules x (A, B)
    assert all(".language_model.layers." in n and ".lora_" in n for n in names)


def test_glm_default_lora_targets_are_a_config_error_naming_the_key(env, tmp_path) -> None:  # noqa: ANN001
    family, tiny = env
    if family != "glm46v":
        pytest.skip("LLaVA-OneVision's Qwen2 decoder has all seven default projections")
    with pytest.raises(ValueError, match=r"method\.lora\.target_modules names \['gate_proj', 'up_proj'\]"):
        make_trainer(tiny, tmp_path, "method=scopd_plus")


@pytest.mark.parametrize("method", ["scopd_plus", "lt_opd"])
def test_one_training_step(method: str, env, tmp_path) -> None:  # noqa: ANN001
    family, tiny = env
    extra = [f"method={method}", "steps=1"]
    if method == "scopd_plus":
        extra.append("method.positions.delta=0.3")  # a few visual tokens per image: 1% more would add none
    if method == "lt_opd" and family == "llava_onevision":  # its tower is not trained here (LLM only)
        extra.append("method.train_vision=false")
    result = run(compose_train(_overrides(family, tiny, tmp_path, *extra)))
    assert result.steps == 1 and result.samples_seen == 2
    assert math.isfinite(result.metrics["train/loss"]) and result.metrics["train/loss"] >= 0.0
    assert 0.0 < result.metrics["train/selected_fraction"] <= 1.0
    assert (result.checkpoint / "config.json").is_file()
