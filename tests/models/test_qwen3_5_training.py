"""Training Qwen3.5: LoRA touches only the language model (exact adapter count), and one step of SCOPD+ and
of LT-OPD trains through the production loop (``model.path`` = a saved tiny Qwen3.5)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from qwen3_5_models import PATCH, tiny_qwen3_5
from safetensors.torch import load_file
from tiny_models import char_processor
from training.test_loop_support import TinyEnv, compose_train, train_overrides, training_items

from sparsectx.data import write_tsv
from sparsectx.models import LoadedModel, ModelConfig, adapter_for, load_model
from sparsectx.models.qwen3_5 import Qwen35Adapter
from sparsectx.training import loop
from sparsectx.training.config import load_train_config
from sparsectx.training.student import build_student

LINEAR, FULL = 3, 1  # the tiny model's decoder: layers 0-2 linear attention, layer 3 full attention


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> TinyEnv:
    """Returns a saved tiny Qwen3.5 (weights, config, processor files) and a 6-row training TSV."""
    root = tmp_path_factory.mktemp("qwen3_5_train")
    model_dir = root / "tiny-qwen3_5"
    processor = char_processor(PATCH, model_dir)
    tiny_qwen3_5(processor.tokenizer, seed=0).save_pretrained(model_dir)
    tsv = root / "train.tsv"
    write_tsv(tsv, training_items(6))
    return TinyEnv(model_dir, tsv)


def _student(env: TinyEnv, tmp_path: Path, *overrides: str):
    cfg = load_train_config(compose_train([*train_overrides(env, tmp_path), *overrides]))
    processor = char_processor(PATCH, tmp_path / "proc")
    model = tiny_qwen3_5(processor.tokenizer, seed=0)
    return build_student(LoadedModel(adapter_for(model, 8), processor), cfg.method, 8)


def test_lora_adapts_only_the_language_model_with_the_expected_count(env, tmp_path) -> None:
    student = _student(env, tmp_path, "method=scopd")
    names = list(student.trainable)
    # The 7 preset modules: q/k/v/o exist in the full-attention layer only, gate/up/down in every layer.
    assert len(names) == (FULL * 7 + LINEAR * 3) * 2
    assert all(".language_model.layers." in n and ".lora_" in n for n in names)
    assert not any("visual" in n for n in names)
    assert sum(".linear_attn." in n for n in names) == 0


def test_lora_reaches_the_linear_attention_projections_when_listed(env, tmp_path) -> None:
    modules = "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,in_proj_qkv,in_proj_z,out_proj]"
    student = _student(env, tmp_path, "method=scopd", f"method.lora.target_modules={modules}")
    names = list(student.trainable)
    assert len(names) == (FULL * 7 + LINEAR * 6) * 2
    assert sum(".linear_attn." in n for n in names) == LINEAR * 3 * 2
    assert not any("visual" in n for n in names)


def test_a_target_module_no_layer_has_names_the_key(env, tmp_path) -> None:
    with pytest.raises(ValueError, match=r"method\.lora\.target_modules names \['qkv_prj'\]"):
        _student(env, tmp_path, "method=scopd", "method.lora.target_modules=[q_proj,qkv_prj]")


@pytest.mark.parametrize("method", ["scopd_plus", "lt_opd"])
def test_one_step_trains_what_the_method_trains(method: str, env, tmp_path) -> None:
    result = loop.run(compose_train([*train_overrides(env, tmp_path), f"method={method}", "steps=1"]))
    assert result.steps == 1
    loss = result.metrics["train/loss"]
    assert torch.isfinite(torch.tensor(loss)) and loss > 0.0
    before = load_file(env.model_dir / "model.safetensors")
    after = load_file(result.checkpoint / "model.safetensors")
    assert before.keys() == after.keys()
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    language = {name for name in changed if name.startswith(("model.language_model.", "lm_head."))}
    tower = {name for name in changed if name.startswith("model.visual.")}
    assert language and language | tower == changed
    assert any(".linear_attn." in name for name in changed) == (method == "lt_opd")  # full parameters
    assert bool(tower) == (method == "lt_opd")  # LT-OPD trains the vision encoder and merger too (App. B)


def _model_config(env: TinyEnv, **changes: object) -> ModelConfig:
    values = dict(
        name="tiny_qwen3_5",
        path=str(env.model_dir),
        dtype="float32",
        device="cpu",
        attn_implementation="sdpa",
        signal_chunk=8,
        vision_attention="grouped",
        image_workers=1,
        vision_mlp_multiple=0,
        compile_blocks="off",
        tile_budget=None,
    )
    return ModelConfig(**{**values, **changes})


def test_a_saved_checkpoint_loads_into_the_qwen3_5_adapter(env) -> None:
    loaded = load_model(_model_config(env))
    assert isinstance(loaded.adapter, Qwen35Adapter) and loaded.adapter.family == "qwen3_5"


def test_a_tiled_family_option_on_qwen3_5_names_the_key(env) -> None:
    with pytest.raises(ValueError, match=r"model\.tile_budget='pooled' .* not to 'qwen3_5' checkpoints"):
        load_model(_model_config(env, tile_budget="pooled"))
