"""Experiment tracking behind one small interface: Weights & Biases (offline unless configured) or nothing."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


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
    """offline | online | disabled; the environment variable WANDB_MODE, when set, takes precedence."""
    dir: str
    """Directory W&B puts its ``wandb/`` folder in: runs land in ``<dir>/wandb/offline-run-*`` (W&B always
    adds the ``wandb/`` level, so the default ``.`` gives the README's ``wandb sync wandb/offline-run-*``)."""
    tags: list[str] = field(default_factory=list)
    """Extra tags added to every run."""

    def __post_init__(self) -> None:
        if self.name not in ("wandb", "none"):
            raise ValueError(f"logger.name={self.name!r} must be 'wandb' or 'none'")
        if self.mode not in ("offline", "online", "disabled"):
            raise ValueError(f"logger.mode={self.mode!r} must be offline, online or disabled")


class Tracker(Protocol):
    """What training, evaluation and table code log through."""

    def log(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Records scalar metrics (at an optimizer step, if given)."""
        ...

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        """Records a table of rows."""
        ...

    def log_image(self, key: str, path: str | Path) -> None:
        """Records an image file (a plot)."""
        ...

    def finish(self) -> None:
        """Closes the run (always called, also on failure)."""
        ...


class NullTracker:
    """A tracker that records nothing (``logger=none``)."""

    run_id: str | None = None

    def log(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Does nothing."""

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        """Does nothing."""

    def log_image(self, key: str, path: str | Path) -> None:
        """Does nothing."""

    def finish(self) -> None:
        """Does nothing."""


class WandbTracker:
    """A W&B run; offline by default, so nothing leaves the machine unless the user asks for it."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.run_id: str = run.id

    def log(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Logs scalar metrics."""
        self.run.log(metrics, step=step)

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        """Logs a ``wandb.Table``."""
        import wandb

        self.run.log({key: wandb.Table(columns=columns, data=rows)})

    def log_image(self, key: str, path: str | Path) -> None:
        """Logs an image file."""
        import wandb

        self.run.log({key: wandb.Image(str(path))})

    def finish(self) -> None:
        """Finishes the run."""
        self.run.finish()


def start_run(
    cfg: LoggerConfig,
    name: str,
    group: str,
    job_type: str,
    tags: list[str],
    config: dict[str, Any],
    resume_id: str | None = None,
) -> Tracker:
    """Returns a tracker for one run: grouped by experiment, tagged (method, pruner, budget ...), resumable by id."""
    if cfg.name == "none":
        return NullTracker()
    import wandb

    Path(cfg.dir).mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=cfg.project,
        entity=cfg.entity,
        mode=os.environ.get("WANDB_MODE", cfg.mode),
        dir=cfg.dir,
        name=name,
        group=group,
        job_type=job_type,
        tags=[*cfg.tags, *tags],
        config=config,
        id=resume_id,
        resume="allow" if resume_id else None,
        settings=wandb.Settings(silent=True, console="off"),
    )
    return WandbTracker(run)
