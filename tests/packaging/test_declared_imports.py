"""Every import of the package is declared (issue 42, item 5): a module that imports a distribution which
``pyproject.toml`` does not name works here only because something else pulled it in, and breaks in a user's
environment where nothing did (``jsonschema`` once, ``yaml`` and ``huggingface_hub`` until issue 42)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
SCANNED = [*sorted((ROOT / "src" / "sparsectx").rglob("*.py")), *sorted((ROOT / "src").glob("*.py"))]
"""The package's modules and the entry scripts (``src/*.py``, which the console commands run)."""
HARNESS_DIR = ROOT / "src" / "sparsectx" / "integrations"
HARNESS_IMPORTS = {
    "vlmeval": "nvidia-vlmeval, installed by `make vlmeval-env` (docs/harnesses.md)",
    "lmms_eval": "lmms-eval, installed by `make lmms-env` (docs/harnesses.md)",
    "pandas": "a dependency of nvidia-vlmeval, imported only in its environment",
    "loguru": "a dependency of lmms-eval, whose logger lmms_eval_model.py logs to, only in its environment",
}
"""Imports allowed only in ``sparsectx/integrations/``: those modules run inside a harness's own environment,
never in the project's (each module's docstring says which), so the harness provides them."""


def normalized(name: str) -> str:
    """Returns a distribution name in PEP 503's normal form (``PyYAML`` and ``pyyaml`` are the same project)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_distributions() -> dict[str, str]:
    """Returns each distribution ``pyproject.toml`` declares (normal form) -> where: ``dependencies`` or the extra
    that names it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    where = {normalized(Requirement(line).name): "dependencies" for line in project["dependencies"]}
    for extra, lines in project.get("optional-dependencies", {}).items():
        for line in lines:
            where.setdefault(normalized(Requirement(line).name), f"optional-dependencies.{extra}")
    return where


def top_level_imports(path: Path) -> set[str]:
    """Returns the top-level module names ``path`` imports absolutely, at any depth of the file (inside functions
    too: a lazy import is still a dependency of the code path that runs it)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_every_third_party_import_is_declared_in_pyproject() -> None:
    declared = declared_distributions()
    providers = packages_distributions()
    undeclared = []
    for path in SCANNED:
        in_harness = HARNESS_DIR in path.parents
        for module in sorted(top_level_imports(path) - set(sys.stdlib_module_names) - {"sparsectx"}):
            if in_harness and module in HARNESS_IMPORTS:
                continue
            distributions = [normalized(name) for name in providers.get(module, [])]
            if not any(name in declared for name in distributions):
                found = f"installed from {', '.join(distributions)}" if distributions else "not installed here"
                undeclared.append(f"{path.relative_to(ROOT)}: import {module} ({found})")
    assert not undeclared, "imports whose distribution pyproject.toml does not declare:\n" + "\n".join(undeclared)


def test_the_harness_allowance_is_used_only_for_what_the_harness_provides() -> None:
    harness_files = [path for path in SCANNED if HARNESS_DIR in path.parents]
    used = set().union(*(top_level_imports(path) for path in harness_files))
    assert set(HARNESS_IMPORTS) <= used, "drop the allowance nothing imports any more"
    outside = [
        f"{path.relative_to(ROOT)}: import {module}"
        for path in SCANNED
        if HARNESS_DIR not in path.parents
        for module in top_level_imports(path) & set(HARNESS_IMPORTS)
    ]
    assert not outside, "harness-only imports outside sparsectx/integrations/:\n" + "\n".join(outside)
