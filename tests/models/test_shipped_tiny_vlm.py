"""The shipped tiny VLM: one safetensors file within budget, loadable offline, shaped as its pretraining config."""

from __future__ import annotations

import json
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from transformers import AutoModelForImageTextToText

from sparsectx.pretrain.train import load_config

ROOT = Path(__file__).resolve().parents[2]
ASSET = ROOT / "src" / "sparsectx" / "assets" / "tiny-vlm"


def test_weights_are_one_file_under_15_mib() -> None:
    weights = list(ASSET.glob("*.safetensors"))
    assert [w.name for w in weights] == ["model.safetensors"]
    assert weights[0].stat().st_size <= 15 * 2**20


def test_loads_offline_with_the_architecture_of_its_pretraining_config() -> None:
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = load_config(compose("pretrain_tiny"))
    model = AutoModelForImageTextToText.from_pretrained(ASSET, local_files_only=True)
    vision, text = model.config.vision_config, model.config.text_config
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    for key, value in vars(cfg.vision).items():
        assert getattr(vision, key) == value, f"vision.{key}"
    for key in [
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
    ]:
        assert getattr(text, key) == getattr(cfg.text, key), f"text.{key}"
    assert "sparsectx_uniform_flash" not in (ASSET / "config.json").read_text()  # a pretraining-only kernel


def test_was_trained_on_the_default_suite_and_schedule_within_the_gpu_budget() -> None:
    """The benchmarks' reference traces and the SFT data follow conf/data/tiny.yaml, so the shipped
    weights must come from exactly that suite; and the issue's budget is 30 GPU-minutes of training."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("pretrain_tiny")
    record = json.loads((ASSET / "training_record.json").read_text())
    assert record["config"]["data"] == OmegaConf.to_container(cfg.data, resolve=True), (
        "conf/data/tiny.yaml no longer describes the suite the shipped model was trained on: retrain it "
        "(python src/pretrain_tiny.py) or restore the data config from its training_record.json"
    )
    # Keys added to the schedule after this run, at the values that reproduce it (0 clips: images only).
    later = {"videos_per_batch": 0}
    trained = {**later, **{k: v for k, v in record["config"]["train"].items() if k != "time_limit_s"}}
    assert trained == {k: v for k, v in OmegaConf.to_container(cfg.train).items() if k != "time_limit_s"}
    assert record["config"].get("video") is None  # images only
    assert record["complete"] and record["steps"] == cfg.train.steps and record["config"]["init_from"] is None
    assert record["train_seconds"] <= 30 * 60
