"""One ``FamilySpec`` per model family, and nothing else that knows about a family by its name.

Every fact the rest of the code reads about a family (its adapter, processor, vision FLOPs formula, whether
in-LLM pruning can run on it, ...) is declared in its record beside its code (``sparsectx/models/<family>.py``);
no other module of the package, entry script or benchmark script compares something with a family's name (or a
name built on it: a model preset ``glm46v_9b``, a text ``model_type`` ``qwen3_5_text``) or keeps a table or list
of such names. A family module lists no pruners either: the pruner registry knows them (the in-LLM refusal reads
``FamilySpec.in_llm_unsupported`` where both are known, ``sparsectx.pruning.config``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sparsectx.models.families import FAMILIES
from sparsectx.pruning import PRUNERS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "sparsectx"
FAMILY_NAMES = tuple(sorted({*FAMILIES.names(), *FAMILIES.model_types()}))
"""Registered family names and the ``config.json`` model_types they accept."""

KNOWN = [
    "src/sparsectx/eval/hybrid_costs.py a table keyed by family names",
]
"""Tables not yet turned into record fields: Qwen3.5's gated ``q_proj`` (by text ``model_type``: transformers 5.17's
``Qwen3_5Attention`` always gates, its config has no switch for it)."""


def _names_family(node: ast.AST) -> bool:
    """Returns whether ``node`` is a string constant naming a family, or a name built on one (``glm46v_9b``)."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return False
    return any(node.value == name or node.value.startswith(f"{name}_") for name in FAMILY_NAMES)


def family_branches_and_tables(path: Path) -> list[str]:
    """Returns ``file:line what`` for every comparison with a family-name literal and every dict keyed by, or
    tuple, list or set holding two or more, family-name literals in the module at ``path``."""
    where = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare) and any(map(_names_family, [node.left, *node.comparators])):
            found.append((node.lineno, "compares with family names"))
        elif isinstance(node, ast.Dict) and any(map(_names_family, node.keys)):
            found.append((node.lineno, "a table keyed by family names"))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and sum(map(_names_family, node.elts)) > 1:
            found.append((node.lineno, "a list of family names"))
    return [f"{where}:{line} {what}" for line, what in sorted(found)]


def outside_the_family_modules() -> list[Path]:
    """Returns the package's modules but the family modules, the entry scripts and the benchmark scripts."""
    family_modules = {PACKAGE / "models" / f"{name}.py" for name in FAMILIES.names()}
    package = [path for path in PACKAGE.rglob("*.py") if path not in family_modules]
    return sorted([*package, *(ROOT / "src").glob("*.py"), *(ROOT / "scripts").glob("*.py")])


def test_no_module_outside_the_family_modules_branches_on_or_tabulates_family_names():
    hits = [hit for path in outside_the_family_modules() for hit in family_branches_and_tables(path)]
    assert [re.sub(r":\d+ ", " ", hit, count=1) for hit in hits] == KNOWN


def test_the_guard_sees_a_branch_a_table_and_a_list(tmp_path):
    module = tmp_path / "newcomer.py"
    module.write_text(
        'def mlp(family):\n    return 6 if family == "qwen2_5_vl" else 4\n'
        'LAYOUTS = {"glm46v": "frames"}\nCHOICES = ("qwen3_vl_4b", "qwen3_5_9b")\nALONE = "qwen3_vl"\n'
    )
    assert family_branches_and_tables(module) == [
        "newcomer.py:2 compares with family names",
        "newcomer.py:3 a table keyed by family names",
        "newcomer.py:4 a list of family names",
    ]


def test_no_family_module_lists_pruners():
    """A family says what it supports (``FamilySpec.in_llm_unsupported``); the pruners to choose instead come from
    the pruner registry, so a new pruner needs no edit in a family module."""
    names = re.compile(r"\b(" + "|".join(map(re.escape, PRUNERS.names())) + r")\b")
    listed = []
    for family in FAMILIES.names():
        tree = ast.parse((PACKAGE / "models" / f"{family}.py").read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
            if isinstance(node.body[0], ast.Expr)
        }
        strings = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        for node in strings:
            named = sorted(set(names.findall(node.value)))
            if id(node) not in docstrings and len(named) > 1:
                listed.append(f"{family}.py:{node.lineno} names pruners {named}")
    assert listed == []
