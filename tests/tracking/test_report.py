"""``make_report.py`` builds the experiment's W&B Report offline: its panels and run filters (issue 14, item 8).

Nothing reaches a server: offline, ``run`` writes the report's definition, read back here with
``wandb-workspaces`` itself.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import wandb_workspaces.reports.v2 as wr
from hydra import compose, initialize_config_dir

from sparsectx.report.wandb_report import (
    DEFINITION,
    bind_runsets,
    build_report,
    load_definition,
    load_report_config,
    logged_outputs,
    run,
)

CONF = Path(__file__).resolve().parents[2] / "conf"
TABLES = ("sweep", "main", "main.recovery", "passk", "efficiency")
PLOTS = ("retain_sweep_tiny", "passk_tiny_syn_count_scopd_visionzip_0.1")


def compose_report(results: Path, *overrides: str):  # noqa: ANN201
    """Returns ``conf/make_report.yaml`` for the tiny study under ``results``, offline."""
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        return compose(
            "make_report",
            overrides=["experiment=tiny", f"results_root={results}", "logger.mode=offline", *overrides],
        )


def write_tables(results: Path) -> Path:
    """Returns the tiny study's tables folder holding the files ``make_tables`` writes (contents unread)."""
    folder = results / "tiny" / "tables"
    folder.mkdir(parents=True)
    for stem in TABLES:
        (folder / f"{stem}.csv").write_text("a,b\n1,2\n")
    for stem in PLOTS:
        (folder / f"{stem}.png").write_bytes(b"")
    return folder


def panel_grids(report: wr.Report) -> list[tuple[str, wr.PanelGrid]]:
    """Returns (section heading, panel grid) of every grid in the report."""
    grids, heading = [], ""
    for block in report.blocks:
        if isinstance(block, wr.H2):
            heading = str(block.text)
        elif isinstance(block, wr.PanelGrid):
            grids.append((heading, block))
    return grids


@pytest.fixture()
def report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> wr.Report:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    folder = write_tables(tmp_path)
    with caplog.at_level(logging.INFO, logger="sparsectx.report.wandb_report"):
        assert run(compose_report(tmp_path)) == folder / DEFINITION
    printed = caplog.text
    assert (
        "wandb sync wandb/offline-run-*" in printed and "make_report.py experiment=tiny logger.mode=online" in printed
    )
    return load_definition(folder / DEFINITION)


def test_every_grid_reads_the_experiments_runs_of_one_job_type(report: wr.Report) -> None:
    assert report.title == "sparsectx: tiny" and report.project == "sparsectx"
    grids = panel_grids(report)
    jobs = {heading: set() for heading, _ in grids}
    for heading, grid in grids:
        (runs,) = grid.runsets
        assert "Metric(\"Group\") == 'tiny'" in runs.filters
        jobs[heading] |= {job for job in ("train", "evaluate", "tables") if f"== '{job}'" in runs.filters}
    assert jobs == {
        "Training curves per method": {"train"},
        "Retain ratio vs budget": {"tables", "evaluate"},
        "The papers' tables": {"tables"},
        "Pass@K (fixed context)": {"tables"},
        "Efficiency": {"tables"},
        "Evaluation predictions": {"evaluate"},
    }


def test_the_panels_show_curves_per_method_retain_tables_and_passk(report: wr.Report) -> None:
    panels = {heading: grid.panels for heading, grid in panel_grids(report) if heading}
    curves = [p for p in panels["Training curves per method"] if isinstance(p, wr.LinePlot)]
    assert [p.y[0].name for p in curves] == load_report_config(compose_report(Path("r"))).train_metrics
    assert all(p.groupby.name == "method.name" for p in curves)

    def tables(heading: str) -> list[str]:
        return [p.table_name for p in panels[heading] if isinstance(p, wr.WeavePanelSummaryTable)]

    assert tables("Training curves per method") == ["rollouts"]
    assert tables("The papers' tables") == ["tables/main", "tables/main.recovery", "tables/sweep"]
    assert tables("Pass@K (fixed context)") == ["tables/passk"]
    assert tables("Evaluation predictions") == [
        f"{b}/predictions" for b in ("syn_detail", "syn_count", "syn_ocr", "syn_pope")
    ]
    media = [
        k
        for grid in panel_grids(report)
        for p in grid[1].panels
        if isinstance(p, wr.MediaBrowser)
        for k in p.media_keys
    ]
    assert sorted(media) == sorted(f"plots/{p}" for p in PLOTS)
    scatter = [p for grid in panel_grids(report) for p in grid[1].panels if isinstance(p, wr.ScatterPlot)]
    assert {p.y.name for p in scatter} == {
        "syn_detail/score",
        "syn_count/score",
        "syn_ocr/score",
        "syn_pope/score",
    }
    assert {p.x.name for p in scatter} == {"budget"}


def test_publishing_points_every_run_set_at_the_project(tmp_path: Path) -> None:
    write_tables(tmp_path)
    rc = load_report_config(compose_report(tmp_path))
    report = build_report(rc, logged_outputs(tmp_path / "tiny" / "tables"), "me")
    bind_runsets(report, "me", rc.logger.project)
    runsets = [runs for _, grid in panel_grids(report) for runs in grid.runsets]
    assert runsets and {(r.entity, r.project) for r in runsets} == {("me", "sparsectx")}


def test_a_report_before_make_tables_names_the_command(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"python src/make_tables.py experiment=tiny"):
        run(compose_report(tmp_path))


def test_wandb_mode_online_in_the_environment_does_not_publish_an_offline_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``WANDB_MODE=online`` exported for another project must not publish this study (``logger.mode`` is
    offline): the definition is written locally, as with no variable set."""
    monkeypatch.setenv("WANDB_MODE", "online")
    folder = write_tables(tmp_path)
    assert run(compose_report(tmp_path)) == folder / DEFINITION
