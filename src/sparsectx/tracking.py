"""Experiment tracking behind one small interface: Weights & Biases (offline unless configured) or nothing.

Every run of one experiment shares its W&B group (the experiment name) and carries the same kinds of tags,
so train, evaluate and make_tables runs can be filtered alike (``sparsectx.report.wandb_report``):
``job_type`` is one of ``JOB_TYPES`` and ``start_run`` adds ``experiment:<name>`` and ``job:<type>`` to the
caller's cell tags (``cell_tags``: ``model:``, ``method:``, ``pruner:``, ``budget:``, ...).
Table cells may be ``PIL.Image.Image``: the W&B tracker stores them as ``wandb.Image`` media.

Nothing leaves the machine unless the config says so (``tracking_mode``): ``logger.mode=online`` uploads, and
``WANDB_MODE`` in the environment may only lower the mode (to offline or disabled), never raise it; the config a
run records in W&B is redacted (``sparsectx.redact``).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from PIL import Image

from sparsectx.redact import redact

log = logging.getLogger(__name__)

JOB_TYPES = ("train", "evaluate", "tables")
"""W&B job types: ``train.py``, ``evaluate.py`` (its mode is a ``mode:`` tag) and ``make_tables.py``."""
MODES = ("disabled", "offline", "online")
"""W&B modes from the one that keeps least to the one that sends most: nothing, files on this machine, uploads."""
MODE_ALIASES = {"dryrun": "offline", "run": "online"}
"""W&B's older names of its modes, as ``WANDB_MODE`` may still give them."""


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
        """Records scalar metrics (at an optimizer step, if given)."""
        ...

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]], step: int | None = None) -> None:
        """Records a table of rows (at a step, if given); ``PIL.Image.Image`` cells are stored as images."""
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

    def __init__(self, run: Any, log_checkpoints: bool) -> None:
        self.run = run
        self.run_id: str = run.id
        self.log_checkpoints = log_checkpoints

    def log(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Logs scalar metrics."""
        self.run.log(metrics, step=step)

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]], step: int | None = None) -> None:
        """Logs a ``wandb.Table``; image cells become ``wandb.Image`` media."""
        import wandb

        cells = [[wandb.Image(c) if isinstance(c, Image.Image) else c for c in row] for row in rows]
        self.run.log({key: wandb.Table(columns=columns, data=cells)}, step=step)

    def log_image(self, key: str, path: str | Path) -> None:
        """Logs an image file."""
        import wandb

        self.run.log({key: wandb.Image(str(path))})

    def log_checkpoint(self, name: str, path: str | Path, metadata: dict[str, Any]) -> None:
        """Logs ``path`` as a ``model`` artifact named ``name`` (sanitised), if checkpoints are logged."""
        if not self.log_checkpoints:
            return
        import wandb

        artifact = wandb.Artifact(artifact_name(name), type="model", metadata=metadata)
        artifact.add_dir(str(path))
        self.run.log_artifact(artifact, aliases=["latest"])

    def finish(self) -> None:
        """Finishes the run."""
        self.run.finish()


def artifact_name(name: str) -> str:
    """Returns ``name`` with every character W&B refuses in an artifact name replaced by ``-``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)


def cell_tags(**parts: Any) -> list[str]:
    """Returns ``key:value`` tags of a run's cell (``model=``, ``method=``, ``pruner=``, ``budget=`` ...)."""
    return [f"{key}:{value}" for key, value in parts.items() if value is not None]


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
) -> Tracker:
    """Returns a tracker for one run: grouped by experiment, tagged (method, pruner, budget ...), resumable by id.

    Its mode is ``tracking_mode``'s; ``config`` is recorded redacted (``sparsectx.redact``).

    Raises:
        ValueError: ``job_type`` is not one of ``JOB_TYPES``.
    """
    if job_type not in JOB_TYPES:
        raise ValueError(f"job_type={job_type!r} must be one of {JOB_TYPES}")
    if cfg.name == "none":
        return NullTracker()
    import wandb

    Path(cfg.dir).mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=cfg.project,
        entity=cfg.entity,
        mode=tracking_mode(cfg, os.environ),
        dir=cfg.dir,
        name=name,
        group=group,
        job_type=job_type,
        tags=list(dict.fromkeys([*cfg.tags, f"experiment:{group}", f"job:{job_type}", *tags])),
        config=redact(config),
        id=resume_id,
        resume="allow" if resume_id else None,
        settings=wandb.Settings(silent=True, console="off"),
    )
    return WandbTracker(run, cfg.log_checkpoints)
