"""The console commands (issue 42, item 5): ``sparsectx-<script>`` runs ``src/<script>.py`` itself (the package's
``sparsectx/scripts/`` links to those files, a wheel copies them), composing the same config from any folder."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from sparsectx import console
from sparsectx.paths import CONF_DIR, PACKAGE_DIR

ROOT = Path(__file__).resolve().parents[2]
MAINTAINER_SCRIPTS = {"pretrain_tiny"}
"""Entry scripts with no console command: ``pretrain_tiny`` rebuilds the shipped model inside a checkout's
``src/sparsectx/assets/`` (its configured ``out_dir``), which an installed package has no business rewriting."""


def entry_scripts() -> set[str]:
    """Returns the names of the entry scripts in ``src/`` (those built on ``sparsectx.cli.entry``)."""
    return {path.stem for path in (ROOT / "src").glob("*.py") if "@entry(" in path.read_text()}


def console_scripts() -> dict[str, str]:
    """Returns ``[project.scripts]`` of ``pyproject.toml``: command -> ``module:function``."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("scripts", {})


def run(cwd: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """Returns the finished ``command`` run in ``cwd`` with the checkout's package importable."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_every_entry_script_but_the_maintainers_has_a_console_command() -> None:
    commands = console_scripts()
    scripts = entry_scripts() - MAINTAINER_SCRIPTS
    lacking = sorted(name for name in scripts if f"sparsectx-{name.replace('_', '-')}" not in commands)
    assert not lacking, (
        f"entry scripts without a console command: {lacking}; for each <script>, add the link "
        "src/sparsectx/scripts/<script>.py -> ../../<script>.py, sparsectx.console.<script> and "
        '[project.scripts] sparsectx-<script> = "sparsectx.console:<script>" (docs/install.md)'
    )
    assert {f"sparsectx-{name.replace('_', '-')}" for name in scripts} == set(commands)
    for name in scripts:
        assert commands[f"sparsectx-{name.replace('_', '-')}"] == f"sparsectx.console:{name}"
        assert callable(getattr(console, name))
        shipped = PACKAGE_DIR / "scripts" / f"{name}.py"
        assert shipped.resolve() == (ROOT / "src" / f"{name}.py").resolve(), f"{shipped} is not src/{name}.py"


def test_the_shipped_config_folder_is_the_checkouts_conf() -> None:
    assert (PACKAGE_DIR / "conf").resolve() == CONF_DIR == (ROOT / "conf").resolve()  # one source of defaults


def test_a_console_command_composes_what_its_script_composes_from_another_folder(tmp_path: Path) -> None:
    args = ["experiment=tiny_demo", "method=scopd", "budget=0.1", "--cfg", "job"]
    launcher = "import sys; from sparsectx.console import train; sys.exit(train())"
    command = run(tmp_path, sys.executable, "-c", launcher, *args)
    script = run(tmp_path, sys.executable, str(ROOT / "src" / "train.py"), *args)
    assert command.returncode == 0 and script.returncode == 0, command.stderr + script.stderr
    assert command.stdout == script.stdout
    job = run(tmp_path, sys.executable, "-c", launcher, "--cfg", "hydra", "--package", "hydra.job")
    assert yaml.safe_load(job.stdout)["name"] == "train"  # train.log, as python src/train.py
