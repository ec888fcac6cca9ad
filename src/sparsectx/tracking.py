"""Experiment tracking behind one small interface: Weights & Biases (offline unless configured) or nothing.

Every run of one experiment shares its W&B group (the experiment name) and carries the same kinds of tags,
so train, evaluate and make_tables runs can be filtered alike (``sparsectx.report.wandb_report``):
``job_type`` is one of ``JOB_TYPES`` and ``start_run`` adds ``experiment:<name>``, ``job:<type>`` and the
``key:value`` tags of the run's cell (``cell_tags``: ``model:``, ``method:``, ``pruner:``, ``budget:``,
``seed:``, ``bench:`` ...) to the caller's tags.
Table cells may be ``PIL.Image.Image``: the W&B tracker stores them as ``wandb.Image`` media.

One job, one run: a run's id is derived from what the job is (``run_id``: experiment, job type and cell), and
``wandb.init`` is asked to resume it (``resume="allow"``), so a rerun of a job continues its run instead of
adding one. A rerun that ran offline writes another directory of the same run (``<dir>/wandb/offline-run-*``);
``wandb sync`` uploads a run's directories in the order they started, each continuing the run's history
(docs/tracking.md). Two things an offline rerun cannot know are handled here: the run's earlier summary
(carried forward from ``summary_file``, as W&B's online resume fetches it) and the history's step, which W&B
renumbers past the run's last one when it syncs a rerun that logs steps again; so every stepped log also
records its optimizer step as the metric ``STEP_METRIC``, the x-axis of the report's curves.

Nothing leaves the machine unless the config says so (``tracking_mode``): ``logger.mode=online`` uploads, and
``WANDB_MODE`` in the environment may only lower the mode (to offline or disabled), never raise it; the config a
run records in W&B is redacted (``sparsectx.redact``).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from PIL import Image

from sparsectx.hashing import config_hash
from sparsectx.io import atomic_write_text
from sparsectx.redact import redact

log = logging.getLogger(__name__)

JOB_TYPES = ("train", "evaluate", "tables")
"""W&B job types: ``train.py``, ``evaluate.py`` (its mode is a ``mode:`` tag) and ``make_tables.py``."""
MODES = ("disabled", "offline", "online")
"""W&B modes from the one that keeps least to the one that sends most: nothing, files on this machine, uploads."""
MODE_ALIASES = {"dryrun": "offline", "run": "online"}
"""W&B's older names of its modes, as ``WANDB_MODE`` may still give them."""
STEP_METRIC = "train/step"
"""The metric every stepped log also records: the optimizer step, whatever step W&B files the row under. W&B
advises treating its own step as a timestamp and plotting against a logged metric (wandb/sdk/wandb_run.py,
``Run.log``); its sync renumbers a rerun's repeated steps past the run's last one (test_resumed_sync.py)."""
RUN_ID_DIGITS = 24
"""Hex digits of a run id's hash (96 bits) after its job type: ``train3f9c...``, 29 to 32 characters."""


@dataclass
class LoggerConfig:
    """The ``logger`` config group (``conf/logger/*.yaml``)."""

    name: str
    """``wandb`` or ``none``."""
    project: str
    """W&B project the runs go to."""
    entity: str | None
    """W&B entity (team or user); None = the default of the logged-in account."""
    mode: str
    """offline | online | disabled. Only ``online`` uploads; ``WANDB_MODE`` in the environment may lower it (to
    offline or disabled) but never raise it (``tracking_mode``)."""
    dir: str
    """Directory W&B puts its ``wandb/`` folder in: runs land in ``<dir>/wandb/offline-run-*`` (W&B always
    adds the ``wandb/`` level, so the default ``.`` gives the README's ``wandb sync wandb/offline-run-*``)."""
    rollout_rows: int
    """Rollouts per logged training step in the ``rollouts`` table (each also decoded by the teacher)."""
    prediction_rows: int | None
    """Items per benchmark in an evaluation's ``<bench>/predictions`` table (None = every item)."""
    log_checkpoints: bool
    """Upload a training run's final ``checkpoint/`` as a W&B model artifact."""
    tags: list[str] = field(default_factory=list)
    """Extra tags added to every run."""

    def __post_init__(self) -> None:
        if self.name not in ("wandb", "none"):
            raise ValueError(f"logger.name={self.name!r} must be 'wandb' or 'none'")
        if self.mode not in ("offline", "online", "disabled"):
            raise ValueError(f"logger.mode={self.mode!r} must be offline, online or disabled")
        if self.rollout_rows < 1:
            raise ValueError(f"logger.rollout_rows={self.rollout_rows} must be >= 1")
        if self.prediction_rows is not None and self.prediction_rows < 1:
            raise ValueError(f"logger.prediction_rows={self.prediction_rows} must be >= 1 or null (every item)")


class Tracker(Protocol):
    """What training, evaluation and table code log through."""

    def log(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Records scalar metrics at an optimizer step, or without one in the run's current row (written when
        the run finishes: a rerun adds its row after the earlier ones)."""
        ...

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]], step: int | None = None) -> None:
        """Records a table of rows (at a step, as ``log``); ``PIL.Image.Image`` cells are stored as images."""
        ...

    def log_image(self, key: str, path: str | Path) -> None:
        """Records an image file (a plot)."""
        ...

    def log_checkpoint(self, name: str, path: str | Path, metadata: dict[str, Any]) -> None:
        """Records a checkpoint directory as a model artifact when ``logger.log_checkpoints`` is on."""
        ...

    def finish(self) -> None:
        """Closes the run (always called, also on failure)."""
        ...


class NullTracker:
    """A tracker that records nothing (``logger=none``)."""

    run_id: str | None = None

    def log(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Does nothing."""

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]], step: int | None = None) -> None:
        """Does nothing."""

    def log_image(self, key: str, path: str | Path) -> None:
        """Does nothing."""

    def log_checkpoint(self, name: str, path: str | Path, metadata: dict[str, Any]) -> None:
        """Does nothing."""

    def finish(self) -> None:
        """Does nothing."""


class WandbTracker:
    """A W&B run; offline by default, so nothing leaves the machine unless the user asks for it."""

    def __init__(self, run: Any, log_checkpoints: bool, summary_path: Path | None = None) -> None:
        """``summary_path``: where an offline run keeps its summary for its next segment (``summary_file``;
        None online)."""
        self.run = run
        self.run_id: str = run.id
        self.log_checkpoints = log_checkpoints
        self.summary_path = summary_path
        self.summary = earlier_summary(summary_path) if summary_path else {}
        if self.summary:
            run.summary.update(self.summary)

    def _log(self, data: dict[str, Any], step: int | None) -> None:
        """Logs ``data`` at optimizer step ``step``, which it also records as ``STEP_METRIC``; without a step,
        adds it to the run's current row (``commit=False``: W&B writes the row at the next step or when the
        run finishes, wandb/sdk/wandb_run.py ``Run.log``), so a rerun's row follows the earlier ones instead
        of being dropped at a step the resumed run has passed."""
        if step is None:
            self.run.log(data, commit=False)
        else:
            data = {**data, STEP_METRIC: step}
            self.run.log(data, step=step)
        self.summary.update(plain_values(data))  # W&B's summary keeps each key's last value too

    def log(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Logs scalar metrics (``_log``)."""
        self._log(metrics, step)

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]], step: int | None = None) -> None:
        """Logs a ``wandb.Table`` (``_log``); image cells become ``wandb.Image`` media."""
        import wandb

        cells = [[wandb.Image(c) if isinstance(c, Image.Image) else c for c in row] for row in rows]
        self._log({key: wandb.Table(columns=columns, data=cells)}, step)

    def log_image(self, key: str, path: str | Path) -> None:
        """Logs an image file into the run's current row."""
        import wandb

        self._log({key: wandb.Image(str(path))}, None)

    def log_checkpoint(self, name: str, path: str | Path, metadata: dict[str, Any]) -> None:
        """Logs ``path`` as a ``model`` artifact named ``name`` (sanitised), if checkpoints are logged."""
        if not self.log_checkpoints:
            return
        import wandb

        artifact = wandb.Artifact(artifact_name(name), type="model", metadata=metadata)
        artifact.add_dir(str(path))
        self.run.log_artifact(artifact, aliases=["latest"])

    def finish(self) -> None:
        """Finishes the run; offline, keeps its summary for the run's next segment (``summary_file``)."""
        self.run.finish()
        if self.summary_path is not None:
            atomic_write_text(self.summary_path, json.dumps(self.summary, indent=1, sort_keys=True))


def artifact_name(name: str) -> str:
    """Returns ``name`` with every character W&B refuses in an artifact name replaced by ``-``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)


def cell_tags(**parts: Any) -> list[str]:
    """Returns ``key:value`` tags of a run's cell (``model=``, ``method=``, ``pruner=``, ``budget=`` ...); a list
    value (``bench=[...]``) gives one tag per item."""
    tags = []
    for key, value in parts.items():
        values = value if isinstance(value, list | tuple) else [value]
        tags += [f"{key}:{item}" for item in values if item is not None]
    return tags


def run_id(experiment: str, job_type: str, cell: Mapping[str, Any]) -> str:
    """Returns the W&B run id of one job: its job type and a hash of the experiment, job type and cell.

    The cell is what the job is (model, method label, pruner, budget, seed; an evaluation's mode and
    benchmarks): the same job always gets the same id, so a rerun resumes its run, and any other job gets
    another. Key order and the order of a list's items do not matter; None values are left out.

    W&B refuses the characters ``:;,#?/'`` in a run id (wandb/sdk/wandb_settings.py
    ``Settings.validate_run_id``) and names its own ids in base 36, ``[a-z0-9]`` (wandb/sdk/lib/runid.py
    ``generate_id``); this id keeps to that alphabet (job type letters, hex digits) and to 32 characters. A
    run deleted in W&B cannot be created again under its id (``wandb.init``'s ``id`` docs): log to another
    ``logger.project`` to start over.
    """
    parts = {
        key: sorted(map(str, value)) if isinstance(value, list | tuple) else str(value)
        for key, value in cell.items()
        if value is not None
    }
    return job_type + config_hash({"experiment": experiment, "job_type": job_type, "cell": parts}, RUN_ID_DIGITS)


def summary_file(wandb_dir: Path, run: str) -> Path:
    """Returns the file an offline run ``run`` keeps its summary in between segments, beside W&B's folders.

    Resumed online, W&B fetches the run's summary and continues it (wandb-core
    ``core/internal/runbranch/resume.go``, ``processResponse``); offline it cannot, and each segment's
    summary replaces the run's when synced, so a rerun that logs other keys (another benchmark) would drop
    the earlier ones. Nor can an offline segment's summary be read back from W&B's files: it lives in the
    segment's ``.wandb`` log (offline, wandb 0.31 writes ``files/wandb-summary.json`` only when the run is
    synced). So the tracker keeps the run's plain summary values (numbers, strings, booleans) here itself
    (``WandbTracker.finish``), and the next offline segment starts from them; media (tables, images)
    reference files of the segment that logged them and are not carried. ``wandb sync`` reads only
    ``*.wandb`` files, so it never takes this file for a run.
    """
    return wandb_dir / "sparsectx-summaries" / f"{run}.json"


def earlier_summary(path: Path) -> dict[str, Any]:
    """Returns the summary an earlier offline segment of the run left in ``path`` (``summary_file``), or {}."""
    return json.loads(path.read_text()) if path.is_file() else {}


def plain_values(data: Mapping[str, Any]) -> dict[str, Any]:
    """Returns the items of ``data`` a run's summary carries between offline segments: numbers, strings and
    booleans under keys that are not W&B's own (``_step``, ``_runtime`` ...)."""
    plain = (bool, int, float, str)
    return {key: value for key, value in data.items() if not key.startswith("_") and isinstance(value, plain)}


def uploads(cfg: LoggerConfig) -> str:
    """Returns what an online run of ``cfg`` sends to W&B's server, for the log."""
    checkpoints = ", the final checkpoint's weights" if cfg.log_checkpoints else ""
    return (
        "metrics, the run's config (credentials redacted), the rollouts and <bench>/predictions tables with their "
        f"benchmark images, questions, references and model outputs, plots and result tables{checkpoints}"
    )


def tracking_mode(cfg: LoggerConfig, environ: Mapping[str, str]) -> str:
    """Returns the W&B mode a run uses: ``cfg.mode``, or ``WANDB_MODE`` from ``environ`` when it sends less.

    On a shared machine ``WANDB_MODE=online`` may be exported for another project; uploading this one's
    benchmark images and model outputs takes ``logger.mode=online`` in its own config. A ``WANDB_MODE`` that
    would send more (or that W&B does not know) is ignored with a warning naming it and what it would upload;
    one that sends less (offline, disabled) is followed. An online run is announced with what it uploads.
    """
    mode, value = cfg.mode, environ.get("WANDB_MODE")
    if value is not None:
        wanted = MODE_ALIASES.get(value.strip().lower(), value.strip().lower())
        if wanted not in MODES or MODES.index(wanted) > MODES.index(mode):
            log.warning(
                "WANDB_MODE=%s in the environment is ignored: logger.mode=%s is used, so W&B records no more than "
                "the config asks for (an online run uploads %s). Set logger.mode=online to upload; WANDB_MODE can "
                "only lower tracking (offline, disabled)",
                value,
                mode,
                uploads(cfg),
            )
        elif wanted != mode:
            log.info("WANDB_MODE=%s in the environment lowers logger.mode=%s", value, mode)
            mode = wanted
    if mode == "online":
        log.warning(
            "W&B is online (logger.mode=online): this run uploads %s to W&B project %s", uploads(cfg), cfg.project
        )
    return mode


def start_run(
    cfg: LoggerConfig,
    name: str,
    group: str,
    job_type: str,
    tags: list[str],
    config: dict[str, Any],
    resume_id: str | None = None,
    cell: Mapping[str, Any] | None = None,
) -> Tracker:
    """Returns a tracker for one job's run: grouped by experiment, tagged with its cell, resumed by id.

    The run's id is ``resume_id`` (a training state's) or else ``run_id(group, job_type, cell)``, and
    ``wandb.init`` resumes it if it exists (``resume="allow"``: wandb/sdk/wandb_init.py ``init``), so a rerun
    continues the run rather than adding one. ``cell`` is what the job is (``run_id``); its items become
    ``key:value`` tags (``cell_tags``) after ``experiment:`` and ``job:``, then ``tags``. Offline, a rerun
    starts from the summary its run's earlier segments left (``summary_file``). The mode is
    ``tracking_mode``'s; ``config`` is recorded redacted (``sparsectx.redact``).

    Raises:
        ValueError: ``job_type`` is not one of ``JOB_TYPES``.
    """
    if job_type not in JOB_TYPES:
        raise ValueError(f"job_type={job_type!r} must be one of {JOB_TYPES}")
    if cfg.name == "none":
        return NullTracker()
    import wandb

    cell = dict(cell or {})
    identity = resume_id or run_id(group, job_type, cell)
    mode = tracking_mode(cfg, os.environ)
    Path(cfg.dir).mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=cfg.project,
        entity=cfg.entity,
        mode=mode,
        dir=cfg.dir,
        name=name,
        group=group,
        job_type=job_type,
        tags=list(dict.fromkeys([*cfg.tags, f"experiment:{group}", f"job:{job_type}", *cell_tags(**cell), *tags])),
        config=redact(config),
        id=identity,
        resume="allow",
        settings=wandb.Settings(silent=True, console="off"),
    )
    kept = summary_file(Path(cfg.dir) / "wandb", identity) if mode == "offline" else None
    return WandbTracker(run, cfg.log_checkpoints, kept)
