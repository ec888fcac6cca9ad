"""The protocol cards: every setting of every job of each real preset has a source, the record names no setting
that no job has, the cards pasted in docs/protocols/ are the generated ones, and a preset (or a run) that sets a
paper-stated value otherwise keeps working but says so on the card and in its log."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from sparsectx.eval.config import CONF_DIR
from sparsectx.protocol.card import NO_SOURCE, build_card
from sparsectx.protocol.record import deviations, protocols, read_protocol, same_value
from sparsectx.protocol.runlog import run_deviations
from sparsectx.protocol.settings import composer, study_jobs
from sparsectx.protocol.study import card_markdown, study_card
from sparsectx.workflow import load_grid
from sparsectx.workflow.commands import train_args

DOCS = CONF_DIR.parent / "docs" / "protocols"
REAL = ["scopd_qwen2_5_vl_7b", "ltopd_qwen3_5_4b"]


@pytest.fixture(scope="module")
def cards() -> dict:
    return {experiment: study_card(experiment) for experiment in REAL}


@pytest.mark.parametrize("experiment", REAL)
def test_every_setting_of_every_job_has_a_source(cards: dict, experiment: str) -> None:
    card = cards[experiment]
    missing = sorted({f"{s.stage}: {s.key}" for s in card.unsourced})
    assert not missing, f"{experiment}: settings with no entry in {card.protocol.path} (add paper/ours): {missing}"
    assert card.counts()["no_source"] == 0
    assert NO_SOURCE not in card_markdown(card)


@pytest.mark.parametrize("experiment", REAL)
def test_every_record_entry_describes_a_setting_of_some_job(cards: dict, experiment: str) -> None:
    """A mistyped key in a record would never apply: every entry must cover a setting of the preset's jobs."""
    card = cards[experiment]
    seen = {(s.stage, s.key) for s in card.settings}
    stale = [
        f"{stage}: {key}"
        for stage, entries in card.protocol.entries.items()
        for key in entries
        if not any(st == stage and (k == key or k.startswith(f"{key}.")) for st, k in seen)
    ]
    assert not stale, f"{card.protocol.path}: entries matching no setting of {experiment}: {stale}"


@pytest.mark.parametrize("experiment", REAL)
def test_the_card_in_docs_is_the_generated_one(cards: dict, experiment: str) -> None:
    pasted = DOCS / f"{experiment}.md"
    assert pasted.read_text() == card_markdown(cards[experiment]), (
        f"{pasted} is stale: make protocol-cards (python -m sparsectx.protocol experiment={experiment} out={pasted})"
    )


def test_the_card_shows_each_composed_value_against_the_paper(cards: dict) -> None:
    """Independent check: the card's values are the composed train config's, compared with the record's."""
    card = cards["scopd_qwen2_5_vl_7b"]
    grid = load_grid("scopd_qwen2_5_vl_7b")
    (run,) = [r for r in grid.train_runs if r.method == "grpo"]
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
        cfg = compose("train", overrides=train_args(grid, run))
    shown = {s.key: s for s in card.settings if s.stage == "train" and s.runs == ["qwen2_5_vl_7b / grpo"]}
    assert shown["method.rl.group_size"].value == cfg.method.rl.group_size == 4  # App. E: G = 4
    assert shown["steps"].value == cfg.steps == 2500  # App. E: 2,500 steps
    assert shown["method.optim.lr"].value == cfg.method.optim.lr
    raw = yaml.safe_load((CONF_DIR / "protocol" / "scopd.yaml").read_text())
    assert not shown["method.optim.lr"].differs
    assert same_value(cfg.method.optim.lr, raw["train"]["method.optim.lr"]["paper"])


def test_a_preset_that_departs_from_the_paper_keeps_working_and_says_so() -> None:
    grid = load_grid("scopd_qwen2_5_vl_7b", {"overrides": {"train": ["method.optim.lr=1e-3"]}})
    protocol = read_protocol(CONF_DIR / "protocol" / "scopd.yaml")
    with composer() as compose_config:
        jobs = [job for job in study_jobs(grid, compose_config) if job.stage == "train"]
    card = build_card("scopd_qwen2_5_vl_7b", protocol, jobs)
    lr = [s for s in card.differing if s.key == "method.optim.lr"]
    assert lr and all(s.value == 1e-3 and s.statement.paper == 2e-5 for s in lr)
    assert "**differs: paper 2e-05**" in card_markdown(card)


def test_a_run_logs_each_paper_stated_setting_it_changes() -> None:
    grid = load_grid("scopd_qwen2_5_vl_7b")
    (run,) = [r for r in grid.train_runs if r.method == "scopd_plus" and r.model == "qwen2_5_vl_7b"]
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
        as_preset = compose("train", overrides=train_args(grid, run))
        changed = compose("train", overrides=[*train_args(grid, run), "method.positions.fraction=0.3"])
    assert run_deviations(as_preset, "train") == []
    (line,) = run_deviations(changed, "train")
    assert "method.positions.fraction = 0.3" in line and "0.1" in line and "§4.1" in line


def test_a_run_outside_the_papers_presets_logs_nothing() -> None:
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
        cfg = compose("train", overrides=["method.optim.lr=1e-3"])
    assert run_deviations(cfg, "train") == []


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"paper": 1}, "without its `source`"),
        ({"label": "x"}, "neither `paper`"),
        ({"ours": "r", "sorce": "typo"}, "unknown fields ['sorce']"),
        ({"ours": "r", "cases": [{"paper": 2, "source": "s"}]}, "names no `methods`"),
        ({"ours": "r", "cases": [{"methods": ["a"], "papr": 2}]}, "unknown fields ['papr']"),
    ],
)
def test_a_malformed_record_entry_is_refused_naming_file_stage_and_key(
    tmp_path: Path, entry: dict, message: str
) -> None:
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump({"paper": "P", "experiments": ["e"], "train": {"method.optim.lr": entry}}))
    with pytest.raises(ValueError, match="train.method.optim.lr") as raised:
        read_protocol(path)
    assert message in str(raised.value) and str(path) in str(raised.value)


def test_cases_pick_the_statement_for_the_run() -> None:
    record = read_protocol(CONF_DIR / "protocol" / "scopd.yaml")
    entry = record.entry("train", "method.teacher.kind")
    assert entry.statement("scopd_plus", "qwen2_5_vl_7b").paper == "ema"
    assert entry.statement("scopd_teacher_fixed", "qwen2_5_vl_7b").paper == "frozen"
    assert not entry.statement("epic", "qwen2_5_vl_7b").states
    assert record.entry("train", "method.rl.reward.params.format_weight").key == "method.rl.reward.params"
    assert deviations(record, "train", {"method.teacher.kind": "frozen"}, "scopd_plus", "m") != []


@pytest.mark.parametrize(
    ("value", "paper", "same"),
    [
        (2e-5, 2.0e-5, True),
        (0.1, 0.1 + 1e-12, True),
        (0.1, 0.2, False),
        ([1, 2], [1, 2], True),
        ([1, 2], [1], False),
        (True, 1, False),
        ("a", ["a"], False),
        (None, None, True),
    ],
)
def test_values_compare_as_the_card_means_them(value: object, paper: object, same: bool) -> None:
    assert same_value(value, paper) is same


def test_every_record_claims_presets_that_exist() -> None:
    presets = {p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")}
    for record in protocols():
        assert set(record.experiments) <= presets, record.path
