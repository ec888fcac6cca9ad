"""The pinned stack (issue 42, item 5): ``constraints.txt`` pins every distribution ``sparsectx[dev]`` installs, at
the versions this environment runs (so CI, which installs through it, and a user who does get the same stack),
and leaves the torch build (CPU or CUDA) to the package index."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
WRITER = ROOT / "scripts" / "write_constraints.py"


def pins(text: str) -> dict[str, str]:
    """Returns the ``name==version`` lines of a constraints file as normalized name -> version."""
    lines = [line.split("#")[0].strip() for line in text.splitlines()]
    return {canonicalize_name(name): pinned for name, _, pinned in (line.partition("==") for line in lines if line)}


def test_constraints_file_is_what_make_constraints_writes_for_this_environment() -> None:
    assert CONSTRAINTS.is_file(), "no constraints.txt: run `make constraints`"
    written = subprocess.run([sys.executable, str(WRITER)], capture_output=True, text=True, timeout=120, check=True)
    assert CONSTRAINTS.read_text() == written.stdout, (
        "constraints.txt differs from this environment's stack: run `make constraints` after changing a dependency"
    )


def test_every_declared_dependency_is_pinned_at_its_installed_version() -> None:
    pinned = pins(CONSTRAINTS.read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = [*project["dependencies"], *project["optional-dependencies"]["workflow"]]
    for requirement in map(Requirement, lines):
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is declared but not pinned in constraints.txt"
        assert pinned[name] == version(requirement.name).partition("+")[0]
        assert requirement.specifier.contains(pinned[name]), f"{name}=={pinned[name]} breaks pyproject's {requirement}"


def test_torch_is_pinned_by_release_so_the_index_picks_the_cpu_or_cuda_build() -> None:
    pinned = pins(CONSTRAINTS.read_text())
    # PEP 440, "Version matching": a public version (no "+local" label) matches any local build of it, so
    # torch==2.13.0 admits this machine's 2.13.0+cpu and PyPI's CUDA wheel, whose version carries no label.
    assert pinned["torch"] == "2.13.0"
    assert not [f"{name}=={pin}" for name, pin in pinned.items() if "+" in pin], "a local build label in a pin"
    assert "sparsectx" not in pinned and "pip" not in pinned
