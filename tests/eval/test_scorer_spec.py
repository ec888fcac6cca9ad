"""One ``ScorerSpec`` per scorer, and nothing else that knows about a scorer by its name.

Every fact the rest of the code reads about a scorer (its per-item correctness, its bootstrap resampling, what the
judge re-reads, its VLMEvalKit reading) is declared in its spec beside its code; no module outside
``sparsectx.eval.scorers`` compares a scorer's name with a literal or keeps a table keyed by scorer names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from sparsectx.eval.scorers import SCORERS, ScorerSpec, score_items
from sparsectx.eval.scorers.base import ScoredItem
from sparsectx.eval.scorers.spec import ITEM_MEAN, Resampling, VlmevalReading

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "sparsectx"
CONF = Path(__file__).resolve().parents[2] / "conf"
NAMED_ELSEWHERE = ("eval/scorers", "rehearsal", "data")
"""Folders whose literals may spell a scorer's name for another reason: the scorers themselves; the rehearsal's
miniature files and the data families, keyed by benchmark and family names (``mme``, ``pope``, ``mcq`` are also
scorer names)."""


def _scorer_literals(node: ast.AST) -> set[str]:
    """Returns the registered scorer names among the string constants directly in ``node`` (a tuple's members)."""
    members = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {m.value for m in members if isinstance(m, ast.Constant) and m.value in SCORERS}


def name_branches_and_tables(path: Path) -> list[str]:
    """Returns ``file:line what`` for every comparison of something with scorer-name literals and every dict,
    tuple, list or set literal holding two or more scorer names, in the module at ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare) and any(_scorer_literals(c) for c in [node.left, *node.comparators]):
            found.append(f"{path}:{node.lineno} compares with scorer names")
        elif (
            isinstance(node, ast.Dict)
            and len({k.value for k in node.keys if isinstance(k, ast.Constant)} & set(SCORERS)) > 1
        ):
            found.append(f"{path}:{node.lineno} a table keyed by scorer names")
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(_scorer_literals(node)) > 1:
            found.append(f"{path}:{node.lineno} a list of scorer names")
    return found


def test_no_module_outside_the_scorers_branches_on_or_tabulates_scorer_names():
    modules = [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if not any(path.relative_to(PACKAGE).as_posix().startswith(f"{folder}/") for folder in NAMED_ELSEWHERE)
    ]
    assert [hit for path in modules for hit in name_branches_and_tables(path)] == []


def test_every_spec_declares_what_its_consumers_read():
    templates = set(yaml.safe_load((CONF / "judge_answers.yaml").read_text())["prompts"])
    for name in SCORERS:
        spec = SCORERS.get(name)
        assert isinstance(spec, ScorerSpec) and spec.name == name
        assert callable(spec.is_correct) and isinstance(spec.resampling, Resampling)
        assert spec.judge is None or spec.judge.template in templates, name
        readings = [spec.vlmeval, *spec.vlmeval_headlines.values()]
        assert all(r is None or (isinstance(r, VlmevalReading) and r.columns) for r in readings), name
        assert set(spec.vlmeval_headlines) <= set(spec.headlines), name


def test_a_spec_without_correctness_or_resampling_cannot_be_built():
    """A jointly scored scorer left without a resampling rule would be resampled item by item, silently."""
    with pytest.raises(TypeError, match="resampling"):
        ScorerSpec(name="never", version=1, fn=lambda items: {}, is_correct=lambda item: True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="is_correct"):
        ScorerSpec(name="never", version=1, fn=lambda items: {}, resampling=ITEM_MEAN)  # type: ignore[call-arg]


@pytest.mark.parametrize("version", [0, 1.0, True, None])
def test_version_must_be_positive_int(version):
    with pytest.raises(ValueError, match="version"):
        ScorerSpec(name="never", version=version, fn=lambda items: {}, is_correct=bool, resampling=ITEM_MEAN)


@pytest.mark.parametrize("headlines", [("score",), ("f1",), ("f1", "score")])
def test_headlines_must_be_several_metrics_other_than_score(headlines):
    with pytest.raises(ValueError, match="headlines"):
        ScorerSpec(
            name="never", version=1, fn=lambda items: {}, is_correct=bool, resampling=ITEM_MEAN, headlines=headlines
        )


def test_correct_is_false_on_a_miss_whatever_the_rule():
    """``ScorerSpec.correct``: an extraction miss is never right (style convention 22), as the predictions say."""
    miss = ScoredItem(id="1", prediction=None, reference="yes")
    assert not any(SCORERS.get(name).correct(miss) for name in SCORERS)
    assert score_items("exact_match", [miss]).metrics["score"] == 0.0
