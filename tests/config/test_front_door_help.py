"""The entry scripts' front door (issue 14, item 9): ``--help`` says what each config group holds and starts
without torch, ``--cfg job --resolve`` (the documented form) prints numbers, not ``${budget}``, and a bad
``budget=`` is reported under the key the user typed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from sparsectx.training.config import load_train_config

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
SCRIPTS = ["train", "evaluate", "make_tables", "build_data", "pretrain_tiny", "preflight", "export", "make_html_report"]
# Runs a script as ``python src/<script>.py <args>`` and reports at exit whether torch was imported.
PROBE = """
import atexit, runpy, sys
atexit.register(lambda: print("torch imported:", "torch" in sys.modules))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_script(script: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Returns the finished ``python src/<script>.py <args>`` (run through ``PROBE``)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-c", PROBE, str(ROOT / "src" / f"{script}.py"), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def composed_groups(script: str) -> set[str]:
    """Returns the top-level config groups ``conf/<script>.yaml`` composes (``optional model/scale/...@_global_``
    counts as ``model``; Hydra's own groups excluded)."""
    defaults = yaml.safe_load((CONF / f"{script}.yaml").read_text())["defaults"]
    keys = [key.split()[-1] for entry in defaults if isinstance(entry, dict) for key in entry]
    return {key.split("@")[0].split("/")[0] for key in keys} - {"hydra"}


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_describes_every_group_and_skips_torch(script: str) -> None:
    done = run_script(script, "--help")
    assert done.returncode == 0, done.stderr
    for group in composed_groups(script):
        assert re.search(rf"^{group} +\w", done.stdout, re.MULTILINE), f"--help does not describe {group}"
    assert "== Main keys" in done.stdout
    assert f"python src/{script}.py" in done.stdout and "--cfg job --resolve" in done.stdout
    assert done.stdout.rstrip().endswith("torch imported: False")


def test_every_help_file_is_selected_by_its_script() -> None:
    assert {path.stem for path in (CONF / "hydra" / "help").glob("*.yaml")} == set(SCRIPTS)
    for script in SCRIPTS:
        assert f"override hydra/help: {script}" in (CONF / f"{script}.yaml").read_text()


def test_documented_cfg_job_resolves_the_budget() -> None:
    done = run_script("train", "method=lt_opd", "budget=0.07", "--cfg", "job", "--resolve")
    assert done.returncode == 0, done.stderr
    assert "${" not in done.stdout
    cfg = yaml.safe_load(done.stdout.rpartition("torch imported:")[0])
    assert cfg["budget"] == 0.07
    assert cfg["method"]["schedule"]["params"]["cosine_curriculum"]["final_budget"] == 0.07


@pytest.mark.parametrize("script", ["train", "evaluate"])
def test_bad_budget_names_the_typed_key(script: str, tmp_path: Path) -> None:
    root = "runs_root" if script == "train" else "results_root"
    done = run_script(script, "budget=1.5", "logger=none", f"{root}={tmp_path}", cwd=tmp_path)
    assert done.returncode == 2  # a config error: its message alone (sparsectx.cli)
    assert "budget=1.5 is outside (0, 1]" in done.stderr and "e.g. budget=0.1" in done.stderr
    assert "Traceback" not in done.stderr
    assert "method.schedule" not in done.stderr


def load(*overrides: str) -> None:
    """Returns None after composing ``conf/train.yaml`` with ``overrides`` and checking it."""
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        load_train_config(compose("train", overrides=list(overrides)))


def test_negative_budget_names_the_typed_key() -> None:
    with pytest.raises(ValueError, match=r"^budget=-0\.1 is outside \(0, 1\]") as raised:
        load("budget=-0.1")
    assert "method.schedule" not in str(raised.value)


def test_an_error_in_a_copied_budget_names_budget() -> None:
    with pytest.raises(ValueError, match=r"final_budget=0\.6 is above start_budget=0\.5") as raised:
        load("method=lt_opd", "budget=0.6")
    assert "final_budget is a copy of budget=0.6: set budget=<value> instead" in str(raised.value)
