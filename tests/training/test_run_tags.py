"""Hand runs are named by what was typed (``sparsectx.run_tags``): a Hydra ``-m`` sweep over seeds and learning
rates trains side by side instead of refusing its second job, a smoke run never resumes into the real run, and a
study preset's runs keep the grid's names."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from eval.test_runner_support import SIDE, base_overrides, write_bench

from sparsectx.eval.trained import leaf_method
from sparsectx.run_tags import derived_tag, resolved_tag, run_label
from sparsectx.training import loop
from training.test_graceful_stop import environment
from training.test_loop_support import TinyEnv, compose_train, shared_env, train_overrides

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


def test_the_typed_run_defining_keys_name_the_run() -> None:
    tag = derived_tag(["method=scopd_plus", "budget=0.1", "seed=1", "method.optim.lr=1e-4", "logger=none"])
    assert tag == "seed1+lr1e-4"  # method and budget name folders already; logger changes nothing trained
    assert derived_tag(["steps=2"]) == "steps2" != derived_tag([])  # a smoke run is not the real run
    assert derived_tag(["save_every=5", "log_every=1", "model=tiny", "pruner=random"]) == ""
    hashed = derived_tag(["method.teacher.ema_decay=0.9"])
    assert re.fullmatch(r"h[0-9a-f]{8}", hashed) and hashed != derived_tag(["method.teacher.ema_decay=0.99"])
    assert derived_tag(["+method.teacher.ema_decay=0.9"]) == hashed  # Hydra's append/force prefixes are the key
    assert derived_tag(["data=lt_14k"]).startswith("h") and derived_tag(["data.out_dir=x"]).startswith("h")


def test_a_study_preset_names_its_runs_by_its_grid_and_an_explicit_tag_is_kept() -> None:
    assert resolved_tag("auto", {"models": {}}, ["seed=1"]) == ""
    assert resolved_tag("auto", None, ["seed=1"]) == "seed1"
    assert resolved_tag("pilot", None, ["seed=1"]) == "pilot" and resolved_tag("", None, ["seed=1"]) == ""
    with pytest.raises(ValueError, match="run_tag='a/b' is not a plain name"):
        resolved_tag("a/b", None, [])
    assert run_label("scopd", "") == "scopd" and run_label("scopd", "seed1") == "scopd+seed1"


def test_a_config_from_the_compose_api_has_no_tag(tiny_env: TinyEnv, tmp_path: Path) -> None:
    cfg = loop.with_resolved_run_tag(compose_train([*train_overrides(tiny_env, tmp_path), "method=sft"]))
    assert cfg.run_tag == ""  # no typed overrides outside a Hydra app: tests and the plan keep the plain folders


@pytest.mark.slow
def test_a_sweep_over_seeds_and_learning_rates_trains_side_by_side_resumes_and_tables(
    tiny_env: TinyEnv, tmp_path: Path
) -> None:
    runs_root, results = tmp_path / "runs", tmp_path / "results"
    shrunk = [o for o in train_overrides(tiny_env, runs_root) if not o.startswith(("seed=", "steps="))]
    command = [sys.executable, str(ROOT / "src" / "train.py"), "-m", "experiment=my_sweep", *shrunk, "method=sft"]
    command += ["steps=1", "seed=0,1", "method.optim.lr=0.01,0.02"]
    first = run(command)
    runs = sorted((runs_root / "my_sweep" / "tiny").iterdir())
    assert len(runs) == 4, runs
    for seed in (0, 1):
        for lr in ("0.01", "0.02"):
            (found,) = [r for r in runs if f"+seed{seed}+lr{lr}+steps1+" in r.name]
            assert found.name.startswith("sft+")
            checkpoint = found / "visionzip" / "0.1" / "checkpoint"
            recorded = yaml.safe_load((checkpoint.parent / "config.yaml").read_text())
            assert (recorded["seed"], recorded["method"]["optim"]["lr"]) == (seed, float(lr))
            assert recorded["run_tag"] == found.name.removeprefix("sft+")
            assert leaf_method("base", checkpoint) == found.name  # its evaluation lands in a leaf of its own
    assert first.count("finished 1 steps") == 4
    again = run(command)  # the same sweep again: each run is found finished, none refused
    assert sorted((runs_root / "my_sweep" / "tiny").iterdir()) == runs and again.count("finished 1 steps") == 4

    # evaluated (one -m sweep over the checkpoints, and the untrained model) and tabled under the sweep's name
    bench = write_bench(tmp_path / "syn_count.tsv", "syn_count", 3, SIDE)
    evaluate = [sys.executable, str(ROOT / "src" / "evaluate.py"), "-m", "experiment=my_sweep", "bench=syn_count"]
    evaluate += [
        o for o in base_overrides(tiny_env.model_dir, results, {"syn_count": bench}, 4) if "model.path" not in o
    ]
    checkpoints = ",".join(str(r / "visionzip" / "0.1" / "checkpoint") for r in runs)
    run([*evaluate, "pruner=visionzip", "budget=0.1", f"checkpoint={checkpoints}"])
    run([*evaluate, f"model.path={tiny_env.model_dir}", "pruner=visionzip", "budget=1"])
    tables = [sys.executable, str(ROOT / "src" / "make_tables.py"), "experiment=my_sweep", f"results_root={results}"]
    printed = run([*tables, "logger=none", f"runs_root={runs_root}", "bootstrap.too_few=no_interval"])
    rows = list(csv.DictReader((results / "my_sweep" / "tables" / "tiny.csv").open()))
    assert sorted(r["method"] for r in rows) == sorted(["Vanilla", *(r.name for r in runs)]), printed


def run(command: list[str]) -> str:
    """Returns the output of ``command`` (run from the repo root), failing with its tail unless it exits 0."""
    done = subprocess.run(command, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr
