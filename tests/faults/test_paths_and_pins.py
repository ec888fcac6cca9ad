"""Fault injection on names and checkpoints (issue 39, item 6): a hostile name, from the command line or from a
trained checkpoint's own ``config.yaml``, is refused before anything is written, never followed outside the
results tree; a hub checkpoint is pinned and read from the local cache, and the run keys of evaluation and
training record the snapshot they read, so an upstream update recomputes instead of reusing.

The hub tests (evaluation, training, preflight) build a Hugging Face cache in a temporary folder
(``models--Org--Name/snapshots/<commit>/``, ``refs/main``) holding tiny random-weight models, with
``HF_HUB_CACHE`` pointed at it and the Hub offline.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from eval.test_preflight import compose_preflight
from eval.test_runner_support import SIDE, build_model_dir, compose_eval, write_bench
from huggingface_hub import constants
from omegaconf import OmegaConf
from tiny_models import char_processor, tiny_qwen2_5_vl
from training.test_loop_support import compose_train

from sparsectx.checkpoints import weight_files
from sparsectx.eval.runner import run
from sparsectx.hashing import file_sha256
from sparsectx.paths import CHECKPOINT_INFO
from sparsectx.preflight import check_checkpoint, load_preflight_config
from sparsectx.training.checkpoint import check_resume
from sparsectx.training.config import run_defining

pytestmark = pytest.mark.faults
BENCH = "syn_count"
REPO = "sparsectx-test/tiny-vlm"
"""The hub id of the fake cache's checkpoint (no such repository is ever contacted: the Hub is offline)."""
COMMIT_A = "a" * 40
COMMIT_B = "b" * 40
"""Commits of the fake cache's two snapshots (test values, not real Hub commits)."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("model"), "qwen2_5_vl", weights=True)


@pytest.fixture(scope="module")
def updated_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Returns the same architecture and processor as ``model_dir`` with other weights (an upstream update)."""
    directory = tmp_path_factory.mktemp("updated")
    processor = char_processor(14, directory)
    tiny_qwen2_5_vl(processor.tokenizer, seed=1).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_bench(tmp_path_factory.mktemp("data") / f"{BENCH}.tsv", BENCH, 2, SIDE)


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Returns an empty Hugging Face cache that every hub read of the test uses, with the Hub offline."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def add_snapshot(cache: Path, commit: str, files: Path, main: bool = True) -> Path:
    """Returns the snapshot folder of ``REPO`` at ``commit`` after copying ``files`` into it; ``main`` points
    ``refs/main`` at it, as a download of the repository's newest commit does."""
    repo = cache / f"models--{REPO.replace('/', '--')}"
    folder = repo / "snapshots" / commit
    shutil.copytree(files, folder)
    if main:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
    return folder


def eval_overrides(model_path: str | Path, tmp_path: Path, bench: Path, *extra: str) -> list[str]:
    """Returns a CPU-sized greedy evaluation of ``BENCH`` on ``model_path`` into ``tmp_path/results``."""
    return [
        f"bench={BENCH}",
        f"model.path={model_path}",
        "logger=none",
        f"results_root={tmp_path / 'results'}",
        "max_failure_rate=1.0",
        f"bench.{BENCH}.path={bench}",
        f"bench.{BENCH}.max_new_tokens=4",
        "budget=0.25",
        *extra,
    ]


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def trained_checkpoint(model_dir: Path, run: Path, names: dict[str, str]) -> Path:
    """Returns ``run/checkpoint``: the model files with the training record ``train.py`` writes inside and its
    resolved ``config.yaml`` beside it, whose method and pruner names are ``names``'s."""
    checkpoint = run / "checkpoint"
    shutil.copytree(model_dir, checkpoint)
    digests = {p.name: file_sha256(p) for p in weight_files(checkpoint)}
    info = {"config_hash": "abc123", "steps": 4, "samples_seen": 32, "weights_sha256": digests}
    (checkpoint / CHECKPOINT_INFO).write_text(json.dumps(info))
    config = {
        "experiment": "dev",
        "seed": 0,
        "budget": 0.25,
        "model": {"name": "tiny"},
        "method": {"name": names.get("method", "scopd")},
        "pruner": {"name": names.get("pruner", "visionzip")},
    }
    (run / "config.yaml").write_text(json.dumps(config))
    return checkpoint


@pytest.mark.parametrize("key", ["method", "pruner"])
def test_checkpoint_config_naming_a_hostile_name_is_refused(model_dir, bench, tmp_path, key):
    run_config = tmp_path / "runs" / "r" / "config.yaml"
    checkpoint = trained_checkpoint(model_dir, run_config.parent, {key: "../../../x"})
    with pytest.raises(ValueError) as err:
        run(compose_eval(eval_overrides(model_dir, tmp_path, bench, f"checkpoint={checkpoint}")))
    message = str(err.value)
    assert f"{key}.name='../../../x'" in message and str(run_config) in message, message
    assert not (tmp_path / "x").exists()
    assert files_under(tmp_path / "results") == []


HOSTILE_CONFIGS = {
    "model.name=../../x": lambda cfg: OmegaConf.update(cfg, "model.name", "../../x"),
    "method.name=../../../x": lambda cfg: OmegaConf.update(cfg, "method.name", "../../../x"),
    # an experiment preset (conf/experiment/<name>.yaml) sets the value; experiment=<name> selects the preset
    "experiment=../x": lambda cfg: OmegaConf.update(cfg, "experiment", "../x"),
}


@pytest.mark.parametrize("override", HOSTILE_CONFIGS)
def test_hostile_name_in_the_config_is_refused_before_anything_is_written(model_dir, bench, tmp_path, override):
    cfg = compose_eval(eval_overrides(model_dir, tmp_path, bench))
    HOSTILE_CONFIGS[override](cfg)
    with pytest.raises(ValueError) as err:
        run(cfg)
    key, _, value = override.partition("=")
    assert f"{key}={value!r}" in str(err.value)
    assert not (tmp_path / "x").exists()
    assert files_under(tmp_path / "results") == []


def test_upstream_update_is_evaluated_again_not_reused(model_dir, updated_model_dir, bench, hub_cache, tmp_path):
    add_snapshot(hub_cache, COMMIT_A, model_dir)
    overrides = eval_overrides(REPO, tmp_path, bench, "model.revision=null")  # unpinned: follows refs/main
    first = json.loads(run(compose_eval(overrides))[0].read_text())
    add_snapshot(hub_cache, COMMIT_B, updated_model_dir)  # upstream pushed new weights; refs/main moved
    second = json.loads(run(compose_eval(overrides))[0].read_text())
    assert second["provenance"]["config_hash"] != first["provenance"]["config_hash"]  # not the first's, reused
    assert first["provenance"]["inputs"]["weights"] == f"{REPO}@{COMMIT_A}"
    assert second["provenance"]["inputs"]["weights"] == f"{REPO}@{COMMIT_B}"
    assert second["resumed_rows"] == 0


def test_two_pinned_snapshots_give_two_result_keys(model_dir, updated_model_dir, bench, hub_cache, tmp_path):
    add_snapshot(hub_cache, COMMIT_A, model_dir, main=False)
    add_snapshot(hub_cache, COMMIT_B, updated_model_dir, main=False)
    outs = {}
    for commit in (COMMIT_A, COMMIT_B):
        out = run(compose_eval(eval_overrides(REPO, tmp_path / commit, bench, f"model.revision={commit}")))[0]
        outs[commit] = json.loads(out.read_text())
    assert outs[COMMIT_A]["model"]["resolved_path"].endswith(COMMIT_A)
    assert outs[COMMIT_B]["model"]["resolved_path"].endswith(COMMIT_B)
    assert outs[COMMIT_A]["provenance"]["config_hash"] != outs[COMMIT_B]["provenance"]["config_hash"]


def test_pinned_revision_missing_locally_names_the_download_command(model_dir, bench, hub_cache, tmp_path):
    add_snapshot(hub_cache, COMMIT_A, model_dir)  # the cache holds another commit than the pinned one
    with pytest.raises(FileNotFoundError) as err:
        run(compose_eval(eval_overrides(REPO, tmp_path, bench, f"model.revision={COMMIT_B}")))
    message = str(err.value)
    assert f"hf download {REPO} --revision {COMMIT_B}" in message, message
    assert "model.local_files_only=false" in message and str(hub_cache) in message
    assert files_under(tmp_path / "results") == []


def test_unpinned_hub_id_warns_and_names_the_snapshot_it_read(model_dir, bench, hub_cache, tmp_path, caplog):
    add_snapshot(hub_cache, COMMIT_A, model_dir)
    with caplog.at_level(logging.WARNING, logger="sparsectx"):
        run(compose_eval(eval_overrides(REPO, tmp_path, bench, "model.revision=null")))
    warned = [r.getMessage() for r in caplog.records if "model.revision=null" in r.getMessage()]
    assert warned and COMMIT_A in warned[0] and "model.revision=" in warned[0], warned


def test_training_run_key_records_the_snapshot(model_dir, updated_model_dir, hub_cache, tmp_path):
    add_snapshot(hub_cache, COMMIT_A, model_dir)
    cfg = compose_train([f"model.path={REPO}", "model.revision=null", "model.name=tiny", f"runs_root={tmp_path}"])
    resolved = OmegaConf.to_container(cfg, resolve=True)
    before = run_defining(resolved)
    add_snapshot(hub_cache, COMMIT_B, updated_model_dir)  # the same hub id now names other weights
    after = run_defining(resolved)
    assert before != after
    with pytest.raises(ValueError, match=rf"model.snapshot: '{REPO}@{COMMIT_A}' -> '{REPO}@{COMMIT_B}'"):
        check_resume({"defining": before, "resolved": resolved}, after, resolved, tmp_path / "run")


def test_checkpoint_config_that_is_no_mapping_is_refused_naming_the_file(model_dir, bench, tmp_path):
    checkpoint = trained_checkpoint(model_dir, tmp_path / "runs" / "r", {})
    (checkpoint.parent / "config.yaml").write_text("- ../../../x\n")  # a list, not train.py's mapping
    with pytest.raises(ValueError, match=rf"{checkpoint.parent / 'config.yaml'} holds a list"):
        run(compose_eval(eval_overrides(model_dir, tmp_path, bench, f"checkpoint={checkpoint}")))
    assert files_under(tmp_path / "results") == []


def test_preflight_reads_the_pinned_snapshot_not_refs_main(model_dir, hub_cache):
    add_snapshot(hub_cache, COMMIT_A, model_dir)  # refs/main names A; the preset pins B
    model = load_preflight_config(compose_preflight(f"model.path={REPO}", f"model.revision={COMMIT_B}")).model
    (problem,) = check_checkpoint("tiny", model).problems
    assert f"revision {COMMIT_B}" in problem.what and f"hf download {REPO} --revision {COMMIT_B}" in problem.fix
    add_snapshot(hub_cache, COMMIT_B, model_dir, main=False)
    checked = check_checkpoint("tiny", model)
    assert checked.problems == [] and checked.file.endswith(COMMIT_B)


def test_preflight_list_finds_a_pinned_download_and_names_its_revision(model_dir, hub_cache):
    """``hf download <id> --revision <sha>`` writes the snapshot but no ``refs/main``: ``--list`` looks it up at
    the pinned commit (found), and its get line names that commit."""
    from sparsectx.preflight.needs import model_needs

    missing = model_needs("tiny", REPO, COMMIT_B)
    assert not missing.present and f"hf download {REPO} --revision {COMMIT_B}" in missing.how
    add_snapshot(hub_cache, COMMIT_B, model_dir, main=False)
    assert model_needs("tiny", REPO, COMMIT_B).present


@pytest.mark.parametrize(
    ("script", "override"),
    [("evaluate.py", "model.name=../../x"), ("train.py", "method.name=../../x"), ("train.py", "pruner.name=../x")],
)
def test_a_hostile_name_on_the_command_line_is_refused_before_hydra_creates_its_folder(
    tmp_path: Path, script: str, override: str
) -> None:
    """Hydra creates ``hydra.run.dir`` (its log, ``.hydra/``) before ``main`` runs: each name in it passes
    ``path_name`` as it resolves, so the command exits naming the key and nothing is created anywhere."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    roots = [f"results_root={work / 'results'}", f"runs_root={work / 'runs'}"]
    cmd = [sys.executable, str(root / "src" / script), override, roots[script == "train.py"], "logger=none"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root / "src")}
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "cannot name an output folder or file" in done.stderr, done.stderr[-2000:]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == [Path("a"), Path("a/b"), Path("a/b/c")]
