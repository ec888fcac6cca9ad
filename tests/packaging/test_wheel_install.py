"""A package that installs anywhere (issue 42, item 5): the wheel ``pip wheel`` builds from a clone, installed into
a fresh virtual environment, runs its console commands from a folder outside the checkout, with the shipped
configs and the shipped tiny model, and composes the config the checkout's script composes.

No network: the wheel is installed with ``--no-deps``, and the fresh environment sees this environment's packages
through a ``.pth`` line. ``venv --system-site-packages`` would not do: it exposes the base interpreter's
site-packages, not this virtual environment's (``venv`` docs, "include-system-site-packages"). A path listed in a
``.pth`` file is added to ``sys.path`` without its own ``.pth`` files being read (``site.addpackage`` only appends
the line; ``site.addsitedir`` reads a directory's ``.pth`` files), so the checkout's editable ``.pth`` stays
unread and ``import sparsectx`` can find only the installed wheel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLONE_PARTS = ["pyproject.toml", "README.md", "src", "conf", "workflow/schemas"]
"""What the build reads from a clone: the project table, its readme, the package and the folders it ships."""
SIZES = [f"data.benches.{bench}.size=4" for bench in ("syn_detail", "syn_count", "syn_spatial", "syn_ocr", "syn_mcq")]
TINY_DATA = [*SIZES, "data.benches.syn_pope.size=6", "data.train.size=4"]
"""A synthetic suite of a few items per benchmark (``syn_pope`` needs a multiple of 6: conf/data/tiny.yaml)."""


def run(command: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """Returns the finished ``command`` run in ``cwd`` without the checkout on ``PYTHONPATH``; raises with its
    output when it fails."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        command, cwd=cwd, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


def copy_clone(dest: Path) -> Path:
    """Returns ``dest`` after copying the files a build reads from a clone (links kept as links, caches and build
    records left out), so the build writes nothing into the checkout."""
    dest.mkdir(parents=True)
    for part in CLONE_PARTS:
        source = ROOT / part
        if source.is_dir():
            ignored = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(source, dest / part, symlinks=True, ignore=ignored)
        else:
            shutil.copy2(source, dest / part)
    return dest


def fresh_venv(where: Path) -> Path:
    """Returns the interpreter of a new virtual environment at ``where`` that sees this environment's packages
    after its own (a ``.pth`` line; module docstring)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    purelib = Path(sysconfig.get_paths(vars={"base": str(where), "platbase": str(where)})["purelib"])
    (purelib / "stack.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return where / "bin" / "python"


@pytest.mark.slow
def test_the_wheel_runs_its_commands_outside_the_checkout(tmp_path: Path) -> None:
    clone = copy_clone(tmp_path / "clone")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", "dist", "."], clone)
    (wheel,) = (clone / "dist").glob("sparsectx-*.whl")

    names = set(zipfile.ZipFile(wheel).namelist())
    conf_files = {f"sparsectx/conf/{p.relative_to(ROOT / 'conf')}" for p in (ROOT / "conf").rglob("*") if p.is_file()}
    assert conf_files <= names, f"conf/ files missing from the wheel: {sorted(conf_files - names)[:5]}"
    assert "sparsectx/workflow/schemas/config.schema.yaml" in names  # make_tables checks the grid against it
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for target in scripts.values():
        script = target.partition(":")[2]
        shipped = zipfile.ZipFile(wheel).read(f"sparsectx/scripts/{script}.py")
        assert shipped == (ROOT / "src" / f"{script}.py").read_bytes(), f"sparsectx/scripts/{script}.py"

    python = fresh_venv(tmp_path / "venv")
    pip = [sys.executable, "-m", "pip", "--python", str(python)]  # this pip, installing into the fresh environment
    run([*pip, "install", "--no-deps", "--no-index", str(wheel)], tmp_path)
    run([*pip, "check"], tmp_path)  # every dependency the wheel declares is met by the pinned stack
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run([str(python), "-c", "import sparsectx; print(sparsectx.__file__)"], elsewhere).stdout.strip()
    assert Path(where).is_relative_to(tmp_path / "venv"), f"imported {where}, not the installed wheel"

    bin_dir = python.parent
    assert set(scripts) <= {path.name for path in bin_dir.iterdir()}
    helped = run([str(bin_dir / "sparsectx-evaluate"), "--help"], elsewhere)
    assert "== Main keys" in helped.stdout

    args = ["experiment=tiny_demo", "method=scopd", "budget=0.1", "--cfg", "job"]
    installed = run([str(bin_dir / "sparsectx-train"), *args], elsewhere).stdout
    checkout = subprocess.run(
        [sys.executable, str(ROOT / "src" / "train.py"), *args], cwd=elsewhere, capture_output=True, text=True
    )
    assert installed == checkout.stdout, "the installed package composes another config than the checkout"

    run([str(bin_dir / "sparsectx-build-data"), *TINY_DATA], elsewhere)
    scored = run([str(bin_dir / "sparsectx-evaluate"), "bench=syn_count", "budget=0.5", "logger=none"], elsewhere)
    result = elsewhere / "results" / "dev" / "tiny" / "base" / "visionzip" / "0.5" / "syn_count.json"
    assert json.loads(result.read_text())["n_scored"] == 4, scored.stdout
