"""The W&B Report keeps models apart: every panel over training or evaluation runs reads one model's runs, so
no line or point averages or mixes two models (issue 42, item 2).

Read back from the definition ``make_report.py`` writes offline (``results/<e>/tables/wandb_report.json``)
with ``wandb-workspaces`` itself, for the tiny study with a second model in its grid.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import wandb_workspaces.reports.v2 as wr

from sparsectx.report.wandb_report import DEFINITION, load_definition, load_report_config, run
from sparsectx.tracking import STEP_METRIC

from .test_report import compose_report, panel_grids, write_tables

MODELS = {"tiny", "tiny_b"}
PER_RUN_SECTIONS = ("Training curves per method", "Retain ratio vs budget", "Evaluation predictions")
"""Sections with grids over training or evaluation runs (one run per cell; the tables run is one per study)."""


@pytest.fixture()
def report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> wr.Report:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    folder = write_tables(tmp_path)
    assert run(compose_report(tmp_path, "+grid.models.tiny_b={}")) == folder / DEFINITION
    return load_definition(folder / DEFINITION)


def filtered_models(filters: str) -> list[str]:
    """Returns the models a run set's filter expression restricts it to (``Config('model.name') == ...``)."""
    return re.findall(r"Config\([\"']model\.name[\"']\) == '([^']+)'", filters)


def test_every_grid_over_cell_runs_reads_one_model_and_every_model_has_its_grids(report: wr.Report) -> None:
    grids = panel_grids(report)
    for section in PER_RUN_SECTIONS:
        per_model: dict[str, list[wr.PanelGrid]] = {}
        for heading, grid in grids:
            (runs,) = grid.runsets
            if heading == section and ("'train'" in runs.filters or "'evaluate'" in runs.filters):
                (model,) = filtered_models(runs.filters)
                per_model.setdefault(model, []).append(grid)
        assert set(per_model) == MODELS, section
        panels = [sorted(type(p).__name__ for p in grid.panels) for (grid,) in per_model.values()]
        assert panels[0] == panels[1], section  # each model gets the same panels
    tables_grids = [grid for _, grid in grids if "'tables'" in grid.runsets[0].filters]
    assert tables_grids and all(not filtered_models(g.runsets[0].filters) for g in tables_grids)


def test_training_curves_are_drawn_against_the_optimizer_step(report: wr.Report) -> None:
    curves = [p for _, grid in panel_grids(report) for p in grid.panels if isinstance(p, wr.LinePlot)]
    assert curves and {p.x.name for p in curves} == {STEP_METRIC}


def test_a_grid_without_models_is_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"grid\.models of experiment=tiny is empty.*conf/experiment"):
        load_report_config(compose_report(tmp_path, "grid.models=null"))
