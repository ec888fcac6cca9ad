"""A user's own ``conf/`` beside the shipped configs (issue 42, item 5): with the package installed, the shipped
``conf/`` is the primary config directory and ``--config-dir conf`` (Hydra's flag) adds the user's folder to the
search path. New files there extend the shipped groups (a preset, a study of one's own); a primary config there
overrides shipped defaults (``--config-name``); a file named like a shipped one is refused, because Hydra would
read the shipped file first and silently ignore the user's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparsectx.cli import EXIT_CONFIG_ERROR, ConfigError, check_command_line
from sparsectx.paths import CONF_DIR

ROOT = Path(__file__).resolve().parents[2]


def train(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Returns the finished ``python src/train.py <args>`` run in ``cwd`` (the checkout's script, as a console
    command runs it)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, str(ROOT / "src" / "train.py"), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def write(path: Path, text: str) -> None:
    """Writes ``text`` to ``path``, creating its folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_users_preset_and_study_name_extend_the_shipped_configs(tmp_path: Path) -> None:
    write(tmp_path / "conf" / "experiment" / "my_grid.yaml", "# @package _global_\nexperiment: my_grid\nseed: 11\n")
    preset = train(tmp_path, "--config-dir", "conf", "experiment=my_grid", "--cfg", "job")
    assert preset.returncode == 0, preset.stderr
    assert yaml.safe_load(preset.stdout)["seed"] == 11
    study = train(tmp_path, "--config-dir", "conf", "experiment=my_own_study", "--cfg", "job")
    assert study.returncode == 0, study.stderr  # a study name needs no preset file, with a user's folder too
    assert yaml.safe_load(study.stdout)["experiment"] == "my_own_study"


def test_a_users_primary_config_overrides_shipped_defaults(tmp_path: Path) -> None:
    write(tmp_path / "conf" / "my_train.yaml", "defaults:\n  - train\n  - _self_\nseed: 7\n")
    done = train(tmp_path, "--config-dir", "conf", "--config-name", "my_train", "--cfg", "job")
    assert done.returncode == 0, done.stderr
    composed = yaml.safe_load(done.stdout)
    assert composed["seed"] == 7 and composed["model"]["name"] == "tiny"


def test_a_users_file_named_like_a_shipped_one_is_refused_before_hydra_ignores_it(tmp_path: Path) -> None:
    write(tmp_path / "conf" / "model" / "tiny.yaml", "name: tiny\npath: package:tiny-vlm\ndtype: bfloat16\n")
    done = train(tmp_path, "--config-dir", "conf", "model=tiny", "--cfg", "job")
    assert done.returncode == EXIT_CONFIG_ERROR, done.stdout
    message = done.stderr.strip()
    assert message.startswith("error: ") and len(message.splitlines()) == 1
    assert str(tmp_path / "conf" / "model" / "tiny.yaml") in message and "model/tiny.yaml" in message
    assert "--config-name" in message  # what to do instead


def test_an_unknown_key_is_answered_in_one_line_with_a_users_folder(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    done = train(tmp_path, "--config-dir", "conf", "sed=3", "--cfg", "job")
    assert done.returncode == EXIT_CONFIG_ERROR
    assert "did you mean seed=3?" in done.stderr


def test_the_shipped_folder_itself_as_config_dir_shadows_nothing() -> None:
    check_command_line(CONF_DIR, "train", ["--config-dir", str(CONF_DIR), "seed=1"], True, None)


def test_a_missing_config_dir_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--config-dir"):
        check_command_line(CONF_DIR, "train", ["--config-dir", str(tmp_path / "nope")], True, None)
