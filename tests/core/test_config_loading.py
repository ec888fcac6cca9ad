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
from sparsectx.eval.config import CONF_DIR, EvalConfig, bench_spec_from, load_eval_config
from sparsectx.training.config import TrainConfig, load_train_config
from tests.cli.test_config_mistakes import run_script

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "sparsectx"
LOADER = "config_schema.py"
THREE_SECTIONS = ["method.optim.lr=abc", "engine.sync_every=0", "train_data.max_skip_fraction=2"]
"""One mistake in each of three sections of the training config."""
EVAL_THREE_SECTIONS = ["engine.sync_every=0", "max_failure_rate=2", "decoding.top_k=abc"]
"""One mistake in each of three sections of the evaluation config: the engine's, the top level's, decoding's."""


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
    assert found == [LOADER]
    assert scripts == []


def eval_cfg(*overrides: str):
    """Returns the composed ``conf/evaluate.yaml`` of the tiny study with ``overrides``."""
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
        return compose("evaluate", overrides=["experiment=tiny", *overrides])


def test_an_eval_config_with_errors_in_three_sections_reports_all_three() -> None:
    with pytest.raises(ValueError) as caught:
        load_eval_config(eval_cfg(*EVAL_THREE_SECTIONS))
    lines = str(caught.value).splitlines()
    assert lines[0] == "3 errors in the evaluation config (conf/evaluate.yaml):", str(caught.value)
    assert any(line.strip() == "engine.sync_every=0 must be a positive integer" for line in lines), lines
    assert any(line.strip() == "max_failure_rate=2.0 must lie in [0, 1]" for line in lines), lines
    assert any(line.strip().startswith("decoding.top_k: Value 'abc'") for line in lines), lines
    assert len(lines) == 4, lines


@pytest.mark.parametrize(
    "override",
    [*EVAL_THREE_SECTIONS, "batch_size=0", "mode=foo", "budget=2", "max_skip_fraction=1", "+engine.bogus=1"],
)
def test_one_eval_error_gives_todays_error(override: str) -> None:
    cfg = eval_cfg(override)
    with pytest.raises(Exception) as expected:
        OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(EvalConfig), cfg))
    with pytest.raises(type(expected.value)) as caught:
        load_eval_config(cfg)
    assert str(caught.value) == str(expected.value)


@pytest.mark.parametrize("override", ["batch_size=auto", "queue_size=auto"])
def test_an_auto_slot_count_still_loads(override: str) -> None:
    """``auto`` stays a string here; ``sparsectx.eval.slots_budget`` resolves it later."""
    loaded = load_eval_config(eval_cfg(override))
    assert getattr(loaded, override.split("=")[0]) == "auto"


def test_the_evaluate_entry_answers_every_error_with_exit_2() -> None:
    done = run_script("evaluate", "experiment=tiny", *EVAL_THREE_SECTIONS)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    lines = done.stderr.strip().splitlines()
    assert lines[0] == "error: 3 errors in the evaluation config (conf/evaluate.yaml):", done.stderr
    for key in ("engine.sync_every", "max_failure_rate", "decoding.top_k"):
        assert sum(key in line for line in lines[1:]) == 1, done.stderr


def test_a_recorded_bench_config_with_two_mistakes_reports_both() -> None:
    with pytest.raises(ValueError) as caught:
        bench_spec_from({**recorded_bench("syn_mcq"), "bogus": 1, "max_new_tokens": "abc"})
    lines = str(caught.value).splitlines()
    assert lines[0] == "2 errors in the recorded benchmark config of syn_mcq:", str(caught.value)
    assert any(line.strip().startswith("bogus: Key 'bogus' not in 'BenchSpec'") for line in lines), lines
    assert any(line.strip().startswith("max_new_tokens: Value 'abc'") for line in lines), lines


def recorded_bench(name: str) -> dict:
    """Returns ``conf/bench/<name>.yaml`` composed as a result records it (plain data)."""
    return OmegaConf.to_container(eval_cfg(f"bench={name}").bench[name], resolve=True)
