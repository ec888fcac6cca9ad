"""Writes ``constraints.txt``: every distribution ``pip install -e '.[dev]'`` installs, pinned at the version this
environment runs, so that ``make`` (CI) and a user installing with ``-c constraints.txt`` get the same stack.

    .venv/bin/python scripts/write_constraints.py constraints.txt   # what `make constraints` runs
    .venv/bin/python scripts/write_constraints.py                   # prints it (tests compare it with the file)

The set is the dependency closure of ``pyproject.toml``'s ``dependencies`` and its ``dev`` extra, read from the
installed distributions' metadata (``importlib.metadata``: each ``Requires-Dist`` whose environment marker holds
here, with the extras asked for: PEP 508), so anything else installed in the environment by hand stays out, and
``pip`` itself, which the Makefile upgrades, too. A pin drops the version's local label (``2.13.0+cpu`` ->
``2.13.0``): PEP 440 ("Version matching") lets ``==2.13.0`` match every local build of that release, so the index
chooses torch's build (this machine's CPU wheel, PyPI's CUDA wheel on a Linux GPU machine, whose extra
requirements, ``nvidia-*``, ``cuda-*`` and ``triton``, torch pins itself and this file leaves alone).
"""

from __future__ import annotations

import os
import sys
import tempfile
import tomllib
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "sparsectx"
EXTRAS = ("dev",)
"""The extras CI installs (``make``: ``pip install -e '.[dev]'``); ``dev`` names ``workflow`` in turn."""
LEFT_OUT = {"pip", PROJECT}
HEADER = """\
# The pinned stack: every distribution `pip install -e '.[dev]'` installs, at the version CI runs (Linux x86-64,
# Python 3.11). Written by `make constraints` (scripts/write_constraints.py); do not edit by hand.
#   make                                              # installs through it (pip install -c constraints.txt)
#   pip install -c constraints.txt sparsectx-<version>-py3-none-any.whl    # the same stack from a wheel
# Pins carry no local build label (torch==2.13.0, not 2.13.0+cpu): the package index picks the build, the CPU
# wheel here and PyPI's CUDA wheel on a Linux GPU machine (docs/install.md).
"""


def project_requirements() -> list[Requirement]:
    """Returns ``pyproject.toml``'s ``dependencies`` and those of ``EXTRAS``, the project's own extras expanded
    (``sparsectx[workflow]`` inside ``dev``)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    requirements = [Requirement(line) for line in project["dependencies"]]
    expanded: set[str] = set()
    pending = list(EXTRAS)
    while pending:
        extra = pending.pop()
        if extra in expanded:
            continue
        expanded.add(extra)
        for requirement in map(Requirement, optional[extra]):
            if canonicalize_name(requirement.name) == PROJECT:
                pending.extend(requirement.extras)
            else:
                requirements.append(requirement)
    return requirements


def applies(requirement: Requirement, extras: Iterable[str]) -> bool:
    """Returns whether ``requirement`` holds in this environment for a distribution installed with ``extras``
    (its marker evaluated with ``extra`` set to each, and to none: PEP 508, "Environment Markers")."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in ("", *extras))


def closure(roots: list[Requirement]) -> dict[str, str]:
    """Returns canonical name -> installed version (local label dropped) of every distribution ``roots`` need
    here, transitively.

    Raises:
        SystemExit: a needed distribution is not installed (the environment is not the project's: run ``make``).
    """
    versions: dict[str, str] = {}
    asked: dict[str, set[str]] = {}
    pending = [(requirement, requirement.extras) for requirement in roots if applies(requirement, ())]
    while pending:
        requirement, extras = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in versions and extras <= asked[name]:
            continue
        try:
            installed = distribution(requirement.name)
        except PackageNotFoundError:
            sys.exit(f"{requirement.name} (needed: {requirement}) is not installed: run `make` first")
        asked[name] = asked.get(name, set()) | set(extras)
        versions[name] = installed.version.partition("+")[0]
        for line in installed.requires or []:
            needed = Requirement(line)
            if applies(needed, asked[name]):
                pending.append((needed, needed.extras))
    return {name: version for name, version in versions.items() if name not in LEFT_OUT}


def constraints_text() -> str:
    """Returns the constraints file for this environment: the header, then one ``name==version`` per line, sorted."""
    pins = closure(project_requirements())
    return HEADER + "".join(f"{name}=={pins[name]}\n" for name in sorted(pins))


def write_atomically(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` through a temporary file in the same folder, so a failed run keeps the old file."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, prefix=f".{path.name}.") as handle:
        handle.write(text)
    os.replace(handle.name, path)


if __name__ == "__main__":
    text = constraints_text()
    if len(sys.argv) > 1:
        write_atomically(Path(sys.argv[1]), text)
    else:
        sys.stdout.write(text)
