"""One experiment name by default across train / evaluate / make_tables, and make_tables says what it found:
a table with no result at all (results written under another experiment) is an error, not a table of dashes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from sparsectx import workflow as wf
from sparsectx.report.study import NoResultsError, run

from .test_study import GRID, SCORES, compose_tables, write_result


def _default_experiment(name: str) -> str:
    return yaml.safe_load((wf.CONF_DIR / f"{name}.yaml").read_text())["experiment"]


def test_train_and_evaluate_default_to_the_same_experiment() -> None:
    assert _default_experiment("train") == _default_experiment("evaluate") == "dev"
    with initialize_config_dir(version_base=None, config_dir=str(wf.CONF_DIR)):
        assert compose("train").experiment == compose("evaluate").experiment
        # an experiment preset on a hand-run command puts it where make_tables experiment=<preset> reads
        assert compose("evaluate", overrides=["experiment=tiny"]).experiment == "tiny"
        assert compose("train", overrides=["experiment=tiny"]).experiment == "tiny"


def _write_all(root: Path) -> None:
    for (method, pruner, budget), scores in SCORES.items():
        for bench, score in scores.items():
            write_result(root, method, pruner, budget, bench, score)


def test_results_under_another_experiment_fail_naming_where_they_are(tmp_path: Path) -> None:
    _write_all(tmp_path)
    (tmp_path / "tiny").rename(tmp_path / "dev")  # the hand-run commands wrote under the default experiment
    with pytest.raises(NoResultsError, match=r"0 result files found under .*tiny/.*\['sweep', 'main'") as err:
        run(compose_tables(tmp_path, grid={**GRID, "passk": None, "efficiency": None}))
    assert f"{tmp_path}/dev/ (13 files)" in str(err.value) and "experiment=tiny" in str(err.value)
    assert (tmp_path / "tiny" / "tables" / "sweep.md").is_file()  # written anyway, for a look


def test_found_results_are_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_all(tmp_path)
    run(compose_tables(tmp_path, grid={**GRID, "passk": None, "efficiency": None}))
    assert "make_tables: 13 result files found under" in capsys.readouterr().out


def test_an_empty_side_table_fails_too(tmp_path: Path) -> None:
    _write_all(tmp_path)  # score tables filled, but no Pass@K or efficiency file
    with pytest.raises(NoResultsError, match=r"\['passk', 'efficiency'\]"):
        run(compose_tables(tmp_path))


def test_cli_exits_non_zero_on_an_empty_tree(tmp_path: Path) -> None:
    script = wf.REPO_DIR / "src" / "make_tables.py"
    cmd = [sys.executable, str(script), "experiment=tiny", f"results_root={tmp_path}", "logger=none"]
    done = subprocess.run(cmd, cwd=wf.REPO_DIR, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "have no result at all" in done.stderr + done.stdout
