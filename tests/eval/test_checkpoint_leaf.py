"""A trained checkpoint's own record names its results leaf: never the untrained model's ``base`` leaf."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from sparsectx.checkpoints import weight_files
from sparsectx.eval.runner import run
from sparsectx.eval.trained import leaf_method, training_record
from sparsectx.hashing import file_sha256
from sparsectx.paths import CHECKPOINT_INFO, budget_tag

from .test_runner_support import CONF, SIDE, base_overrides, build_model_dir, compose_eval, write_bench

BENCH = "syn_count"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("model"), "qwen2_5_vl", weights=True)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {BENCH: write_bench(tmp_path_factory.mktemp("data") / f"{BENCH}.tsv", BENCH, 2, SIDE)}


def fake_checkpoint(model_dir: Path, runs: Path, method: str, with_config: bool = True) -> Path:
    """Returns ``runs/dev/tiny/<method>/visionzip/0.1/checkpoint``: the model files plus the training record
    ``train.py`` writes (``sparsectx_training.json`` inside, the resolved ``config.yaml`` beside it)."""
    run_dir = runs / "dev" / "tiny" / method / "visionzip" / "0.1"
    checkpoint = run_dir / "checkpoint"
    shutil.copytree(model_dir, checkpoint)
    digests = {p.name: file_sha256(p) for p in weight_files(checkpoint)}
    info = {"config_hash": "abc123", "steps": 4, "samples_seen": 32, "git": "deadbeef", "lora_merged": True}
    (checkpoint / CHECKPOINT_INFO).write_text(json.dumps({**info, "weights_sha256": digests}))
    if with_config:
        config = {
            "experiment": "dev",
            "seed": 0,
            "budget": 0.1,
            "model": {"name": "tiny"},
            "method": {"name": method, "prefix": "rollout"},
            "pruner": {"name": "visionzip"},
        }
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    return checkpoint


def _snapshot(leaf: Path) -> dict[str, bytes]:
    return {str(p.relative_to(leaf)): p.read_bytes() for p in sorted(leaf.rglob("*")) if p.is_file()}


def test_checkpoint_without_method_writes_its_own_leaf_and_leaves_base_untouched(model_dir, bench, tmp_path):
    results = tmp_path / "results"
    common = [f"bench={BENCH}", *base_overrides(model_dir, results, bench, 4), "budget=0.1"]
    (base_out,) = run(compose_eval(common))
    base_leaf = results / "dev" / "tiny" / "base" / "visionzip" / "0.1"
    assert base_out == base_leaf / f"{BENCH}.json"
    before = _snapshot(base_leaf)

    checkpoint = fake_checkpoint(model_dir, tmp_path / "runs", "scopd")
    (out,) = run(compose_eval([*common, f"checkpoint={checkpoint}"]))  # the README's command: no method=
    assert out == results / "dev" / "tiny" / "scopd" / "visionzip" / "0.1" / f"{BENCH}.json"
    assert json.loads(out.read_text())["method"] == "scopd"
    assert _snapshot(base_leaf) == before  # the Vanilla results are not overwritten


def test_conflicting_method_is_an_error_naming_both(model_dir, bench, tmp_path):
    checkpoint = fake_checkpoint(model_dir, tmp_path / "runs", "scopd")
    overrides = [f"bench={BENCH}", *base_overrides(model_dir, tmp_path / "results", bench, 4)]
    with pytest.raises(ValueError, match=r"method=sft conflicts .*trained with method=scopd"):
        run(compose_eval([*overrides, "method=sft", f"checkpoint={checkpoint}"]))
    assert not (tmp_path / "results").exists()
    # the same method as the record is accepted
    assert leaf_method("scopd", checkpoint) == "scopd"


def test_record_without_config_needs_method(model_dir, tmp_path):
    checkpoint = fake_checkpoint(model_dir, tmp_path / "runs", "scopd", with_config=False)
    with pytest.raises(ValueError, match="pass method="):
        leaf_method("base", checkpoint)
    assert leaf_method("scopd_plus", checkpoint) == "scopd_plus"


def test_untrained_directories_keep_the_given_method(model_dir):
    assert training_record(None) is None
    assert training_record(model_dir) is None  # no sparsectx_training.json: a pretrained model directory
    assert leaf_method("base", model_dir) == "base"
    assert leaf_method("base", None) == "base"


def test_record_holds_the_training_run(model_dir, tmp_path):
    record = training_record(fake_checkpoint(model_dir, tmp_path / "runs", "lt_opd"))
    assert record is not None
    assert {k: record[k] for k in ("method", "pruner", "budget", "seed", "config_hash", "steps")} == {
        "method": "lt_opd",
        "pruner": "visionzip",
        "budget": 0.1,
        "seed": 0,
        "config_hash": "abc123",
        "steps": 4,
    }


def test_hydra_run_dir_takes_the_checkpoints_method(model_dir, tmp_path):
    """``src/evaluate.py``'s log folder (hydra.run.dir) is the same leaf, so Hydra's files never land in base."""
    checkpoint = fake_checkpoint(model_dir, tmp_path / "runs", "scopd")
    OmegaConf.register_new_resolver("budget_tag", budget_tag, replace=True)
    OmegaConf.register_new_resolver("leaf_method", leaf_method, replace=True)
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        cfg = compose("evaluate", overrides=[f"checkpoint={checkpoint}", "budget=0.1"], return_hydra_config=True)
        assert cfg.hydra.run.dir == "results/dev/tiny/scopd/visionzip/0.1"
        bad = compose("evaluate", overrides=[f"checkpoint={checkpoint}", "method=sft"], return_hydra_config=True)
        with pytest.raises(Exception, match="conflicts"):
            _ = bad.hydra.run.dir
