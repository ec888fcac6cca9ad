"""The rehearsal of a real study: the same grid and commands, scaled to a laptop CPU (``conf/rehearsal.yaml``).

The Snakemake config key ``rehearsal: true`` (set by ``python -m sparsectx.rehearsal``) keeps every job of the
preset and changes three things: each job's command gets the rehearsal's overrides last (CPU, float32, two
optimizer steps, short answers), a job's GPUs become at most ``processes`` CPU processes (gloo), and each
benchmark's answer cap becomes ``max_new_tokens``. A rehearsal writes only under its own working directory
(``snakemake --directory rehearsal/<experiment>``): run from the checkout itself it is refused, so it can never
write into the real ``results/`` tree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsectx.workflow.config import CONF_DIR, REPO_DIR, load_yaml

REHEARSAL_CONF = CONF_DIR / "rehearsal.yaml"


@dataclass(frozen=True)
class Rehearsal:
    """How a rehearsal scales each job (``conf/rehearsal.yaml``)."""

    processes: int
    """CPU processes standing in for a job's GPUs when it has more than one."""
    max_new_tokens: int
    """Each benchmark's answer cap in every evaluation job."""
    seed: int
    """The tiny checkpoints' random weights."""
    overrides: Mapping[str, tuple[str, ...]]
    """Stage -> Hydra overrides appended last to that stage's command."""

    def stage_overrides(self, stage: str, benches: Iterable[str] = ()) -> list[str]:
        """Returns what the rehearsal appends to a ``stage`` job reading ``benches`` (their answer caps)."""
        caps = [f"bench.{name}.max_new_tokens={self.max_new_tokens}" for name in benches]
        return [*self.overrides.get(stage, ()), *caps]

    def resources(self, resources: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
        """Returns ``grid.resources`` with each stage's GPUs as at most ``processes`` CPU processes, one core
        per process, so two jobs share a two-core laptop."""
        scaled = {}
        for stage, res in resources.items():
            processes = min(res["gpu"], self.processes)
            scaled[stage] = {**res, "gpu": processes, "cpus_per_task": max(processes, 1)}
        return scaled


def load_rehearsal(path: Path = REHEARSAL_CONF) -> Rehearsal:
    """Returns the rehearsal settings of ``path`` (default ``conf/rehearsal.yaml``)."""
    raw: dict[str, Any] = load_yaml(path)
    stages = {stage: tuple(values or ()) for stage, values in raw["overrides"].items()}
    return Rehearsal(int(raw["processes"]), int(raw["max_new_tokens"]), int(raw["seed"]), stages)


def rehearsal_of(config: Mapping[str, Any], workdir: Path | None = None) -> Rehearsal | None:
    """Returns the rehearsal settings when the Snakemake config says ``rehearsal: true``, else None.

    Raises:
        ValueError: a rehearsal would run in the checkout itself (``workdir``, default the current directory),
            where it would write into the real ``results/``, ``runs/`` and ``logs/``.
    """
    if not config.get("rehearsal", False):
        return None
    here = (Path.cwd() if workdir is None else workdir).resolve()
    if here == REPO_DIR:
        raise ValueError(
            f"rehearsal=true in {here}, the checkout: its jobs would write into the real results/ and runs/. "
            "Run it with `make rehearse EXPERIMENT=<preset>` (python -m sparsectx.rehearsal), which works in "
            "rehearsal/<preset>/, or pass snakemake --directory <another folder>"
        )
    return load_rehearsal()
