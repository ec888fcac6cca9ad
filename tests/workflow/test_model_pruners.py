"""A model's ``unsupported_pruners``: its cells with those pruners are missing with the reason, the rest run."""

from __future__ import annotations

import copy

import pytest

from sparsectx import workflow as wf

PRESETS = sorted(p.stem for p in (wf.CONF_DIR / "experiment").glob("*.yaml"))


def _tiny(reasons: dict[str, str], method_pruners: dict[str, str] | None = None) -> wf.Grid:
    grid = copy.deepcopy(wf.load_yaml(wf.CONF_DIR / "experiment" / "tiny.yaml")["grid"])
    grid["models"]["tiny"] = {"unsupported_pruners": reasons}
    for method, pruner in (method_pruners or {}).items():
        grid["methods"][method]["pruner"] = pruner
    wf.validate_config({"experiment": "tiny", "grid": grid, "hydra_overrides": {}})
    return wf.Grid("tiny", grid)


def test_a_model_pruner_mark_makes_exactly_those_cells_missing() -> None:
    plain = wf.load_grid("tiny")
    marked = _tiny({"fastv": "fastv cannot run on this family"})
    gone = set(plain.cells()) - set(marked.cells())
    assert gone and all(c.pruner == "fastv" for c in gone)
    assert {c for c in plain.cells() if c.pruner == "fastv"} == gone
    reasons = {m.cell: m.reason for m in marked.missing_cells()}
    assert {c for c, r in reasons.items() if "on tiny" in r} == gone
    assert all(reasons[c] == "pruner fastv on tiny: fastv cannot run on this family" for c in gone)


def test_a_training_pruner_marked_on_the_model_makes_its_trained_cells_missing() -> None:
    method = next(c.method for c in wf.load_grid("tiny").cells() if c.method != wf.BASE)
    marked = _tiny({"divprune": "divprune cannot run on this family"}, {method: "divprune"})
    assert not [c for c in marked.cells() if c.method == method]
    reasons = [m.reason for m in marked.missing_cells() if m.cell.method == method]
    assert reasons and all("divprune on tiny: divprune cannot run on this family" in r for r in reasons)


@pytest.mark.parametrize(
    ("reasons", "message"),
    [
        ({"no_such_pruner": "a pruner nobody declared"}, r"grid\.models\.tiny\.unsupported_pruners names"),
        ({"visionzip": "the reference pruner itself"}, r"holds the reference pruner 'visionzip'"),
    ],
)
def test_bad_model_pruner_marks_name_the_key(reasons: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _tiny(reasons)


@pytest.mark.parametrize("name", PRESETS)
def test_every_model_pruner_reason_shows_up_as_missing(name: str) -> None:
    raw = wf.load_yaml(wf.CONF_DIR / "experiment" / f"{name}.yaml")["grid"]
    reasons = {r for spec in raw["models"].values() for r in ((spec or {}).get("unsupported_pruners") or {}).values()}
    reported = " | ".join(m.reason for m in wf.missing_cells(name))
    assert all(r in reported for r in reasons)
