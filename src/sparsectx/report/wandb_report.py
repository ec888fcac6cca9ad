"""``make_report.py``: one experiment's W&B Report, built with ``wandb-workspaces`` from its runs and tables.

Sections (panel grids, each over one set of the experiment's runs, filtered by W&B group = experiment and
job type, as ``sparsectx.tracking`` names them). Every grid over training or evaluation runs reads one model's
runs (``Config('model.name')``, one grid per model of the grid's ``models``), so no line averages two models
and no plot mixes them:

- training curves per method: per model, the ``train`` runs' ``train_metrics`` lines against the optimizer
  step (``sparsectx.tracking.STEP_METRIC``) grouped by ``method.name``, and their ``rollouts`` table
  (student answer beside the teacher's full-context answer);
- retain ratio vs budget: the ``make_tables`` run's retain plots, and per model each benchmark's greedy score
  against ``budget`` over the ``evaluate`` runs;
- the papers' tables: every table ``make_tables`` logged (``tables/<stem>``);
- Pass@K: its table and plots; then efficiency (if the grid has it) and per model the evaluation predictions
  tables.

Table and plot names are read from ``<results_root>/<experiment>/tables/`` (what ``make_tables`` wrote and
logged), so run it first. Online, the report is saved to W&B; offline (the default) its definition, the
JSON that W&B stores for a report, is written to ``tables/wandb_report.json`` (``load_definition`` reads it
back) with the commands that publish it once the runs are synced.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from sparsectx.config_schema import load_config
from sparsectx.io import atomic_write_text
from sparsectx.report.study import tables_dir
from sparsectx.tracking import STEP_METRIC, LoggerConfig, tracking_mode

GREEDY = "Config('mode') == 'greedy'"
"""Run filter of greedy evaluations (``evaluate.py``'s default mode; Pass@K and efficiency runs differ)."""
log = logging.getLogger(__name__)

DEFINITION = "wandb_report.json"
"""File name of the offline report definition in the tables folder."""


@dataclass
class ReportConfig:
    """The whole ``make_report.py`` job (``conf/make_report.yaml``)."""

    experiment: str
    """Stem of the ``conf/experiment`` preset (``experiment=<name>``): the W&B group of its runs."""
    grid: Any
    """The preset's ``grid:`` block; its ``models`` get a grid each, its ``benchmarks`` name the score and
    predictions panels."""
    logger: LoggerConfig
    """Project, entity and mode: online publishes, offline writes the definition."""
    results_root: str
    """Root holding ``<experiment>/tables/`` (written by ``make_tables.py``)."""
    title: str
    """The report's title."""
    description: str
    """The line under the title."""
    train_metrics: list[str]
    """Training curves drawn per method (keys the train runs log)."""

    def __post_init__(self) -> None:
        if self.grid is None:
            raise ValueError("grid is null: choose a study with experiment=<preset> (conf/experiment/)")
        if not dict(self.grid).get("models"):
            raise ValueError(
                f"grid.models of experiment={self.experiment} is empty: the report draws one grid per model; "
                "name the study's models in its conf/experiment preset"
            )
        if not self.train_metrics:
            raise ValueError("train_metrics is empty: name at least one logged key, e.g. train/loss")


def load_report_config(cfg: DictConfig) -> ReportConfig:
    """Returns the composed config as a checked ``ReportConfig``; unknown, missing or mistyped keys raise, all at
    once."""
    return load_config(ReportConfig, cfg, "the report config (conf/make_report.yaml)")


@dataclass(frozen=True)
class Logged:
    """What ``make_tables`` logged for the experiment: table stems and plot names (file stems)."""

    tables: list[str]
    plots: list[str]


def logged_outputs(folder: Path) -> Logged:
    """Returns the tables (``*.csv``) and plots (``*.png``) in ``folder``, which ``make_tables`` logged.

    Raises:
        FileNotFoundError: ``folder`` holds no table (``make_tables.py`` has not run for the experiment).
    """
    tables = sorted(p.stem for p in folder.glob("*.csv"))
    if not tables:
        experiment = folder.parent.name
        raise FileNotFoundError(
            f"no tables in {folder}: run `python src/make_tables.py experiment={experiment}` first (the "
            "report shows what it logged)"
        )
    return Logged(tables, sorted(p.stem for p in folder.glob("*.png")))


def runset(name: str, experiment: str, job_type: str, extra: str = "") -> Any:
    """Returns the runs of ``experiment`` (W&B group) with ``job_type``, further filtered by ``extra``."""
    import wandb_workspaces.reports.v2 as wr

    filters = f"Metric('Group') == '{experiment}' and Metric('JobType') == '{job_type}'"
    return wr.Runset(name=name, filters=f"{filters} and {extra}" if extra else filters)


def of_model(model: str, extra: str = "") -> str:
    """Returns the run filter of ``model``'s runs (the ``model.name`` every run's config records), and ``extra``."""
    own = f"Config('model.name') == '{model}'"
    return f"{own} and {extra}" if extra else own


def per_model(rc: ReportConfig, name: str, job_type: str, panels: list[Any], extra: str = "") -> list[Any]:
    """Returns, for every model of the grid, a heading and a grid of ``panels`` over its ``job_type`` runs."""
    import wandb_workspaces.reports.v2 as wr

    blocks = []
    for model in models(rc):
        runs = runset(f"{name}: {model}", rc.experiment, job_type, of_model(model, extra))
        blocks += [wr.H3(text=f"Model {model}"), _grid(runs, panels)]
    return blocks


def _grid(runs: Any, panels: list[Any]) -> Any:
    import wandb_workspaces.reports.v2 as wr

    return wr.PanelGrid(runsets=[runs], panels=panels)


def _tables(names: list[str]) -> list[Any]:
    import wandb_workspaces.reports.v2 as wr

    return [wr.WeavePanelSummaryTable(table_name=name, layout=wr.Layout(w=24, h=12)) for name in names]


def training_section(rc: ReportConfig) -> list[Any]:
    """Returns the training-curves blocks: each metric per method, and the rollout table."""
    import wandb_workspaces.reports.v2 as wr

    curves = [
        wr.LinePlot(title=key, x=STEP_METRIC, y=[key], groupby=wr.Config("method.name")) for key in rc.train_metrics
    ]
    return [
        wr.H2(text="Training curves per method"),
        wr.P(
            text=f"Per model, one line per method (its runs grouped by method.name and averaged) against the "
            f"optimizer step {STEP_METRIC}. The rollouts table: the student's answer at budget b beside the "
            "teacher's greedy answer from the full context."
        ),
        *per_model(rc, "train", "train", [*curves, *_tables(["rollouts"])]),
    ]


def _media(plots: list[str]) -> list[Any]:
    import wandb_workspaces.reports.v2 as wr

    return [wr.MediaBrowser(title=p, media_keys=[f"plots/{p}"], layout=wr.Layout(w=12, h=10)) for p in plots]


def retain_section(rc: ReportConfig, logged: Logged) -> list[Any]:
    """Returns the retain-vs-budget blocks: make_tables' retain plots, and score vs budget per benchmark."""
    import wandb_workspaces.reports.v2 as wr

    plots = [p for p in logged.plots if p.startswith("retain_")]
    scatter = [
        wr.ScatterPlot(title=f"{bench}: score vs budget", x=wr.Config("budget"), y=wr.SummaryMetric(f"{bench}/score"))
        for bench in benchmarks(rc)
    ]
    blocks = [wr.H2(text="Retain ratio vs budget")]
    if plots:
        blocks.append(_grid(runset("tables", rc.experiment, "tables"), _media(plots)))
    else:
        blocks.append(wr.P(text="No retain plot: the grid has no table over two or more budgets below 1."))
    return [*blocks, *per_model(rc, "evaluate greedy", "evaluate", scatter, GREEDY)]


def tables_section(rc: ReportConfig, logged: Logged) -> list[Any]:
    """Returns the blocks of the papers' tables, Pass@K and efficiency, and the evaluation predictions."""
    import wandb_workspaces.reports.v2 as wr

    tables_run = runset("tables", rc.experiment, "tables")
    score_tables = [t for t in logged.tables if t not in ("passk", "efficiency")]
    blocks = [
        wr.H2(text="The papers' tables"),
        _grid(tables_run, _tables([f"tables/{t}" for t in score_tables])),
    ]
    if "passk" in logged.tables:
        media = _media([p for p in logged.plots if p.startswith("passk_")])
        blocks += [
            wr.H2(text="Pass@K (fixed context)"),
            _grid(tables_run, [*_tables(["tables/passk"]), *media]),
        ]
    if "efficiency" in logged.tables:
        blocks += [wr.H2(text="Efficiency"), _grid(tables_run, _tables(["tables/efficiency"]))]
    predictions = _tables([f"{bench}/predictions" for bench in benchmarks(rc)])
    blocks += [
        wr.H2(text="Evaluation predictions"),
        *per_model(rc, "evaluate greedy", "evaluate", predictions, GREEDY),
    ]
    return blocks


def benchmarks(rc: ReportConfig) -> list[str]:
    """Returns the grid's benchmark names (its ``benchmarks`` block)."""
    return list(dict(rc.grid).get("benchmarks") or {})


def models(rc: ReportConfig) -> list[str]:
    """Returns the grid's model names (its ``models`` block), each the ``model.name`` of its runs."""
    return list(dict(rc.grid)["models"])


def build_report(rc: ReportConfig, logged: Logged, entity: str) -> Any:
    """Returns the ``wandb_workspaces`` Report of the experiment (nothing is sent anywhere)."""
    import wandb_workspaces.reports.v2 as wr

    return wr.Report(
        project=rc.logger.project,
        entity=entity,
        title=rc.title,
        description=rc.description,
        blocks=[*training_section(rc), *retain_section(rc, logged), *tables_section(rc, logged)],
        width="fluid",
    )


def definition_json(report: Any) -> str:
    """Returns the report's definition: the JSON of its view spec, as W&B stores it."""
    return report._to_model().model_dump_json(by_alias=True, exclude_none=True, indent=1)


def load_definition(path: Path) -> Any:
    """Returns the Report whose definition ``definition_json`` wrote to ``path``."""
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces.reports.v2 import internal

    return wr.Report._from_model(internal.ReportViewspec.model_validate_json(path.read_text()))


def publish_hint(rc: ReportConfig, path: Path) -> str:
    """Returns the offline message: where the definition is and the commands that publish the report."""
    return (
        f"offline: wrote the W&B report definition to {path}\n"
        "to publish it: wandb login; wandb sync wandb/offline-run-*   (uploads the runs), then\n"
        f"  python src/make_report.py experiment={rc.experiment} logger.mode=online"
    )


def bind_runsets(report: Any, entity: str, project: str) -> None:
    """Returns None after pointing every run set at ``entity/project`` (saving resolves the project's id)."""
    import wandb_workspaces.reports.v2 as wr

    for block in report.blocks:
        if isinstance(block, wr.PanelGrid):
            for runs in block.runsets:
                runs.entity, runs.project = entity, project


def run(cfg: DictConfig) -> Path | str:
    """Returns the published report's URL (online) or the path of its written definition (offline).

    Offline, the run sets name no entity or project: resolving one needs the server, so publishing
    rebuilds the report online rather than uploading the written definition.
    """
    rc = load_report_config(cfg)
    folder = tables_dir(rc.results_root, rc.experiment)
    logged = logged_outputs(folder)
    if tracking_mode(rc.logger, os.environ) == "online":  # WANDB_MODE may lower the mode, never raise it
        import wandb

        entity = rc.logger.entity or wandb.Api().default_entity
        report = build_report(rc, logged, entity)
        bind_runsets(report, entity, rc.logger.project)
        report.save()
        log.info("published the W&B report: %s", report.url)
        return str(report.url)
    path = folder / DEFINITION
    atomic_write_text(path, definition_json(build_report(rc, logged, rc.logger.entity or "")))
    log.info("%s", publish_hint(rc, path))
    return path
