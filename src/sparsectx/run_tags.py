"""The name of a training run outside a study preset: the run-defining keys typed on the command line.

Inside a study preset (``experiment=<preset>``, a ``grid``) the grid names every run:
``runs/<experiment>/<model>/<method>/<pruner>/<budget>/``. A run outside one (the default ``experiment=dev``, or a
name with no preset file) is named by what was typed: each run-defining override (``RUN_DEFINING_PREFIXES``, plus
``steps`` and the ``data`` preset) besides the keys that already name a folder joins the method's folder name,
``scopd_plus+seed1+lr1e-4+steps2``: ``seed``, ``method.optim.lr`` and ``steps`` readably, every other one as a short
hash (``h3f2a9c1b``). So ``python src/train.py -m seed=0,1 method.optim.lr=1e-4,5e-4`` trains four runs side by side,
and a ``steps=2`` smoke run never resumes into the real run. ``run_tag=<name>`` names a run explicitly
(``run_tag=`` for none). The overrides are Hydra's ``hydra.overrides.task``, the list ``hydra.job.override_dirname``
is built from (hydra/core/utils.py ``_get_override_dirname`` / hydra/_internal/config_loader_impl.py).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

RUN_DEFINING_PREFIXES = (
    "model.name",
    "model.path",
    "model.dtype",
    "model.thinking",
    "model.answer_prefix",
    "model.max_visual_tokens",
    "method.",
    "budget",
    "pruner.",
    "seed",
    "train_data.",
    "memory.optimizer_states",
)
"""Keys that define what a run trains: changing one and resuming the same run directory is an error. Every
other key (steps, save_every, logging, devices, ...) only changes the schedule or bookkeeping: resuming warns.
``sparsectx.training.config.run_defining`` adds ``model.snapshot``, the identity of the checkpoint read
(``model.revision`` and ``model.local_files_only`` say where it is read from, so they are not run-defining
themselves)."""

AUTO = "auto"
"""``run_tag``'s default: the tag is derived from the typed overrides (none inside a study preset)."""
FOLDER_KEYS = ("experiment", "model", "method", "pruner", "budget", "model.name", "method.name", "pruner.name")
"""Overrides that already name a folder of the run directory: never part of the tag."""
NAMING_KEYS = ("steps", "data")
"""Not run-defining keys (a resumed run may change them), yet what a hand run is: a ``steps=2`` smoke run, or
another ``data`` preset or ``data.*`` key (the training file derives from them), is another run."""
READABLE = {"seed": "seed", "method.optim.lr": "lr", "steps": "steps"}
"""Overrides spelled out in the tag (key -> prefix); the others are hashed together."""
TAG_SEPARATOR = "+"
PLAIN_VALUE = re.compile(r"[A-Za-z0-9._-]+")


def override_key_value(override: str) -> tuple[str, str] | None:
    """Returns (key, value) of one Hydra command-line override (``+``/``++``/``~`` stripped), or None for a
    deletion without a value."""
    key, sep, value = override.lstrip("+~").partition("=")
    return (key.strip(), value.strip()) if sep else None


def names_the_run(key: str) -> bool:
    """Returns whether an override of ``key`` makes another run (a run-defining or naming key, not a folder)."""
    if key in FOLDER_KEYS or key.startswith("hydra."):
        return False
    prefixes = RUN_DEFINING_PREFIXES + NAMING_KEYS
    return any(key == p or key.startswith(p if p.endswith(".") else p + ".") for p in prefixes)


def derived_tag(overrides: Iterable[str]) -> str:
    """Returns the tag of a run from its typed overrides: the readable ones (``READABLE``) in that order, then a
    hash of the rest; ``""`` when none names the run."""
    typed = dict(kv for kv in map(override_key_value, overrides) if kv is not None and names_the_run(kv[0]))
    parts = [
        f"{prefix}{typed.pop(key)}" for key, prefix in READABLE.items() if PLAIN_VALUE.fullmatch(typed.get(key, ""))
    ]
    if typed:
        text = "\n".join(f"{key}={value}" for key, value in sorted(typed.items()))
        parts.append("h" + hashlib.sha256(text.encode()).hexdigest()[:8])
    return TAG_SEPARATOR.join(parts)


def resolved_tag(setting: str, grid: Mapping[str, Any] | None, overrides: Iterable[str]) -> str:
    """Returns the tag of a run: ``setting`` itself unless it is ``auto``; under ``auto`` none inside a study
    preset (``grid`` set: its grid names the runs) and ``derived_tag(overrides)`` outside one.

    Raises:
        ValueError: an explicit ``run_tag`` is not a plain name (letters, digits, ``.``, ``_``, ``-``, ``+``).
    """
    if setting != AUTO:
        if setting and not re.fullmatch(r"[A-Za-z0-9._+-]+", setting):
            raise ValueError(f"run_tag={setting!r} is not a plain name: use letters, digits, '.', '_', '-', '+'")
        return setting
    return "" if grid else derived_tag(overrides)


def run_label(method_name: str, tag: str) -> str:
    """Returns the method folder of a run: ``method_name``, or ``<method_name>+<tag>`` for a tagged run."""
    return f"{method_name}{TAG_SEPARATOR}{tag}" if tag else method_name


def typed_overrides() -> list[str]:
    """Returns the overrides typed for this Hydra job (``hydra.overrides.task``), or [] outside a Hydra app (a
    config from the compose API, as tests and the plan build it)."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def run_label_resolver(method_name: str, setting: str, grid: Any, overrides: Any) -> str:
    """The ``run_label`` resolver of ``hydra.run.dir`` (conf/train.yaml): the method folder Hydra creates is
    the one ``run`` trains in."""
    return run_label(method_name, resolved_tag(setting, grid, list(overrides or [])))
