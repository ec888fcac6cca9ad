"""A real model is refused the tiny synthetic training set (issue 41, item 4), at config-check time.

``python src/train.py model=qwen2_5_vl_7b`` composes ``train_data.path: ${data.out_dir}/train.tsv`` of the synthetic
suite (``conf/data/tiny.yaml``); only the Snakemake presets switch to the papers' files. The expected overrides
are read from the build recipes that write the real training files (``conf/data/sources/*.yaml``,
``training_set.out_path``), not written here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from sparsectx.training.config import load_train_config

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
REAL_TRAINING_FILES = sorted(
    {
        yaml.safe_load(path.read_text())["training_set"]["out_path"]
        for path in (CONF / "data" / "sources").glob("*.yaml")
    }
)


def _compose(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        return compose("train", overrides=overrides)


def test_the_papers_training_files_are_known() -> None:
    assert len(REAL_TRAINING_FILES) >= 2  # SCOPD's LLaVA-CoT 10K and LT-OPD's LT-14K


@pytest.mark.parametrize("model", ["qwen2_5_vl_7b", "qwen3_vl_4b"])
def test_a_real_model_with_the_default_training_set_is_refused_naming_both_keys_and_the_fix(model: str) -> None:
    with pytest.raises(ValueError) as refused:
        load_train_config(_compose([f"model={model}"]))
    message = str(refused.value)
    assert f"model={model}" in message
    assert "train_data.path=data/tiny/train.tsv" in message  # what it would train on
    for path in REAL_TRAINING_FILES:  # what to type instead
        assert f"train_data.path={path}" in message
    assert "train_data.path=<your file>" in message


def test_the_pipelines_copy_of_the_suite_is_recognised_by_its_data_preset_not_its_folder() -> None:
    with pytest.raises(ValueError, match=r"model=qwen2_5_vl_7b.*train_data\.path=data/suite-abc/train\.tsv"):
        load_train_config(_compose(["model=qwen2_5_vl_7b", "data.out_dir=data/suite-abc"]))


def test_naming_the_suites_training_file_explicitly_is_refused_too() -> None:
    with pytest.raises(ValueError, match=r"train_data\.path=data/tiny/\./train\.tsv"):
        load_train_config(_compose(["model=qwen2_5_vl_7b", "train_data.path=data/tiny/./train.tsv"]))


@pytest.mark.parametrize("path", REAL_TRAINING_FILES)
def test_a_real_model_with_a_real_training_file_passes(path: str) -> None:
    cfg = load_train_config(_compose(["model=qwen2_5_vl_7b", f"train_data.path={path}"]))
    assert cfg.train_data.path == path


def test_a_real_model_with_a_suite_of_another_data_preset_passes() -> None:
    # a data preset of the user's own (any name but the synthetic suite's) names a training split that is theirs
    cfg = load_train_config(_compose(["model=qwen2_5_vl_7b", "data.name=my_suite", "data.out_dir=data/mine"]))
    assert cfg.train_data.path == "data/mine/train.tsv"


@pytest.mark.parametrize(
    "overrides",
    [
        [],  # model=tiny
        ["model=tiny_video_vlm"],
        ["model.path=runs/dev/tiny/scopd/visionzip/0.1/checkpoint"],  # a trained tiny checkpoint, trained further
    ],
    ids=["tiny", "tiny_video_vlm", "tiny_checkpoint"],
)
def test_the_tiny_models_train_on_the_tiny_set(overrides: list[str]) -> None:
    assert load_train_config(_compose(overrides)).train_data.path == "data/tiny/train.tsv"


def test_the_check_runs_before_torch_is_imported() -> None:
    """The refusal needs no heavy import: an entry point can run it before torch loads (about 7 s)."""
    code = (
        "import sys\n"
        "from hydra import compose, initialize_config_dir\n"
        "from sparsectx.train_data_check import check_training_data\n"
        f"with initialize_config_dir(version_base=None, config_dir={str(CONF)!r}):\n"
        "    cfg = compose('train', overrides=['model=qwen2_5_vl_7b'])\n"
        "try:\n"
        "    check_training_data(cfg)\n"
        "except ValueError:\n"
        "    assert 'torch' not in sys.modules, 'torch was imported'\n"
        "    print('refused')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused"
