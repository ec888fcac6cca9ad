"""Pretraining split into calls that each stop on the time limit ends at the same weights as one call."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir

from sparsectx.pretrain import train
from sparsectx.pretrain.train import run

CONF = Path(__file__).resolve().parents[2] / "conf"
ASSET = Path(__file__).resolve().parents[2] / "src" / "sparsectx" / "assets" / "tiny-vlm"
PROCESSOR_FILES = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "processor_config.json"]
# A small architecture and a reduced suite keep one CPU step well under a second.
SMALL = [
    "device=cpu",
    "vision.depth=2",
    "vision.hidden_size=32",
    "vision.intermediate_size=64",
    "vision.num_heads=2",
    "vision.fullatt_block_indexes=[1]",
    "text.hidden_size=64",
    "text.intermediate_size=128",
    "text.num_hidden_layers=1",
    "text.num_attention_heads=2",
    "text.num_key_value_heads=1",
    "text.mrope_section=[4,6,6]",
    "data.scene.image_size=112",
    "data.scene.large_size=[20,28]",
    "data.scene.small_size=[10,14]",
    "data.families.ocr.text_scale=[1,2]",
    "vision.window_size=112",
    "data.families.detail.num_large=[2,3]",
    "data.families.detail.num_small=[1,1]",
    "data.families.count.count=[1,2]",
    "data.families.count.num_distractors=[1,2]",
    "data.families.spatial.num_distractors=[1,2]",
    "data.families.spatial.min_offset=20",
    "data.families.ocr.num_distractors=[0,1]",
    "data.families.pope.num_objects=[2,3]",
    "data.families.mcq.count=[1,2]",
    "data.families.mcq.num_distractors=[1,2]",
    "data.families.describe.num_objects=[2,3]",
    "train.batch_size=3",
    "train.num_workers=0",
    "train.steps=4",
    "train.warmup_steps=2",
    "train.log_every=1",
    "train.save_every=100",
    "train.main_threads=1",
    "train.bf16=false",
    *(f"data.benches.{name}.size=6" for name in ["syn_detail", "syn_count", "syn_spatial", "syn_ocr"]),
    "data.benches.syn_pope.size=6",
    "data.benches.syn_mcq.size=12",
]


def _processor_dir(tmp: Path) -> Path:
    folder = tmp / "processor"
    folder.mkdir(parents=True)
    for name in PROCESSOR_FILES:
        shutil.copy(ASSET / name, folder / name)
    return folder


def _run(out: Path, state: Path, time_limit: float) -> dict:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "pretrain_tiny",
            overrides=[
                *SMALL,
                f"out_dir={out}",
                f"state_dir={state}",
                f"train.time_limit_s={time_limit}",
            ],
        )
    return run(cfg)


@pytest.mark.slow
def test_time_limited_calls_reach_the_uninterrupted_weights(tmp_path: Path) -> None:
    whole_out, split_out = _processor_dir(tmp_path / "whole"), _processor_dir(tmp_path / "split")
    whole = _run(whole_out, tmp_path / "whole" / "state", time_limit=1e9)
    assert whole["step"] == 4 and whole["done"]

    steps = []
    for _ in range(4):  # a zero time limit stops every call after one step
        result = _run(split_out, tmp_path / "split" / "state", time_limit=0.0)
        steps.append(result["step"])
    assert steps == [1, 2, 3, 4] and result["done"]

    want = torch.load(tmp_path / "whole" / "state" / "state.pt", weights_only=False)
    got = torch.load(tmp_path / "split" / "state" / "state.pt", weights_only=False)
    assert want["model"].keys() == got["model"].keys()
    for name, tensor in want["model"].items():
        assert torch.equal(got["model"][name], tensor), name
    assert [c["loss"] for c in got["curve"]] == [c["loss"] for c in want["curve"]]
    assert (split_out / "model.safetensors").is_file() and (split_out / "training_record.json").is_file()


@pytest.mark.slow
def test_training_seconds_add_up_over_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = itertools.count()
    monkeypatch.setattr(train, "time", SimpleNamespace(time=lambda: float(next(ticks))))
    out = _processor_dir(tmp_path)
    seconds = []
    for _ in range(3):  # a fake clock ticking once per reading: each one-step call lasts a few ticks
        _run(out, tmp_path / "state", time_limit=0.0)
        seconds.append(json.loads((out / "training_record.json").read_text())["train_seconds"])
    per_call = [seconds[0], seconds[1] - seconds[0], seconds[2] - seconds[1]]
    assert all(1 <= ticks_in_call <= 10 for ticks_in_call in per_call), seconds
    curve = torch.load(tmp_path / "state" / "state.pt", weights_only=False)["curve"]
    assert [c["step"] for c in curve] == [1, 2, 3]
    assert [c["seconds"] for c in curve] == sorted(c["seconds"] for c in curve) and curve[-1]["seconds"] < seconds[-1]


@pytest.mark.slow
def test_a_state_without_summed_seconds_is_refused_by_name(tmp_path: Path) -> None:
    out, state = _processor_dir(tmp_path), tmp_path / "state"
    _run(out, state, time_limit=0.0)
    saved = torch.load(state / "state.pt", weights_only=False)
    del saved["seconds"]
    torch.save(saved, state / "state.pt")
    with pytest.raises(ValueError, match=r"state\.pt has no 'seconds'"):
        _run(out, state, time_limit=0.0)
