"""One config contract (issue 43, item 3): every typed config is loaded by ``sparsectx.config_schema.load_config``,
which reports every error of a config at once (one line each, naming its key) and, for a config with one error,
exactly the message the entry gave before; the entry scripts answer a config with several errors with all of
them, exit status 2, no traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from sparsectx.budget import check_budget
from sparsectx.eval.config import CONF_DIR
from sparsectx.training.config import TrainConfig, load_train_config
from tests.cli.test_config_mistakes import run_script

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "sparsectx"
LOADER = "config_schema.py"
NOT_YET_CONVERTED = {"eval/config.py", "eval/harness.py"}
"""Modules another change of issue 43 is editing now; their conversions follow it (this set only shrinks)."""
THREE_SECTIONS = ["method.optim.lr=abc", "engine.sync_every=0", "train_data.max_skip_fraction=2"]
"""One mistake in each of three sections of the training config."""


def train_cfg(*overrides: str):
    """Returns the composed ``conf/train.yaml`` of the tiny study with ``overrides``."""
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
        return compose("train", overrides=["experiment=tiny", *overrides])


def todays_error(cfg) -> Exception:
    """Returns the error the plain merge-and-convert raises for ``cfg`` (what each loader did before)."""
    with pytest.raises(Exception) as caught:
        OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainConfig), cfg))
    return caught.value


def test_a_train_config_with_errors_in_three_sections_reports_all_three() -> None:
    cfg = train_cfg("budget=2", "method.optim.lr=abc", "engine.sync_every=0")
    with pytest.raises(ValueError) as caught:
        load_train_config(cfg)
    lines = str(caught.value).splitlines()
    assert lines[0].startswith("3 errors in "), str(caught.value)
    assert any(line.strip().startswith("budget=2 is outside (0, 1]") for line in lines), lines
    assert any(line.strip().startswith("method.optim.lr: Value 'abc'") for line in lines), lines
    assert any(line.strip().startswith("engine.sync_every=0") for line in lines), lines
    assert len(lines) == 4, lines  # the budget copied into the method's schedule is not reported twice


@pytest.mark.parametrize("override", ["method.optim.lr=abc", "engine.sync_every=0", "train_data.max_skip_fraction=2"])
def test_one_error_gives_todays_error(override: str) -> None:
    cfg = train_cfg(override)
    expected = todays_error(cfg)
    with pytest.raises(type(expected)) as caught:
        load_train_config(cfg)
    assert str(caught.value) == str(expected)


def test_one_budget_error_gives_todays_message() -> None:
    """``budget`` is checked under its own name; its copy in the method's schedule adds no second error."""
    with pytest.raises(ValueError) as expected:
        check_budget(2, "budget")
    with pytest.raises(ValueError) as caught:
        load_train_config(train_cfg("budget=2"))
    assert str(caught.value) == str(expected.value)


def test_the_train_entry_answers_every_error_with_exit_2() -> None:
    done = run_script("train", "experiment=tiny", *THREE_SECTIONS)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("error: 3 errors in "), done.stderr
    for key in ("method.optim.lr", "engine.sync_every", "train_data.max_skip_fraction"):
        assert sum(key in line for line in lines[1:]) == 1, done.stderr


def test_every_typed_config_is_converted_by_the_one_loader() -> None:
    """``OmegaConf.to_object`` (merge with the schema, then build the dataclasses) appears in the one module."""
    pattern = re.compile(r"OmegaConf\.to_object\(")
    found = sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if pattern.search(path.read_text(encoding="utf-8"))
    )
    scripts = sorted(path.name for path in PACKAGE.parent.glob("*.py") if pattern.search(path.read_text()))
    assert [name for name in found if name not in NOT_YET_CONVERTED] == [LOADER]
    assert scripts == []
    assert set(found) >= NOT_YET_CONVERTED, "a module was converted: drop it from NOT_YET_CONVERTED"
