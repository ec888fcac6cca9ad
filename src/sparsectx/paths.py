"""Output paths as pure functions of the config: one results leaf per (experiment, model, method, pruner,
budget, benchmark), one training directory per (experiment, model, method, pruner, budget)."""

from __future__ import annotations

import math
from pathlib import Path


def budget_tag(budget: float | str) -> str:
    """Returns the path spelling of a budget fraction: 0.1 -> "0.1", 1.0 -> "1" (also from "0.1", "1").

    It is also the ``budget_tag`` resolver of every ``hydra.run.dir``, which Hydra resolves before any
    config check: a bad ``budget=`` override fails here, so the error names the key, the value and the fix.

    Raises:
        ValueError: ``budget`` is not a finite number.
    """
    try:
        value = float(budget)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(budget, bool) or not math.isfinite(value):
        raise ValueError(
            f"budget={budget!r} is not a number: set budget to the kept fraction of visual tokens in (0, 1], "
            "e.g. budget=0.1 (1 = full context)"
        )
    return f"{value:g}"


def leaf_dir(root: str | Path, experiment: str, model: str, method: str, pruner: str, budget: float) -> Path:
    """Returns ``root/experiment/model/method/pruner/budget`` (the directory of one evaluation leaf)."""
    return Path(root) / experiment / model / method / pruner / budget_tag(budget)


def result_path(leaf: Path, bench: str) -> Path:
    """Returns the results JSON of one benchmark in a leaf directory."""
    return leaf / f"{bench}.json"


def predictions_path(leaf: Path, bench: str) -> Path:
    """Returns the predictions JSONL of one benchmark in a leaf directory."""
    return leaf / f"{bench}.predictions.jsonl"


def run_dir(root: str | Path, experiment: str, model: str, method: str, pruner: str, budget: float) -> Path:
    """Returns the training directory: ``checkpoint/`` (final, loadable) and ``state/`` (resume) live in it."""
    return Path(root) / experiment / model / method / pruner / budget_tag(budget)


def step_log_path(run: str | Path) -> Path:
    """Returns the per-step log of a training directory (``run_dir``): one JSON line per optimizer step, the
    step's metrics as logged to the tracker (``training.loop``)."""
    return Path(run) / "steps.jsonl"


def token_trace_path(run: str | Path) -> Path:
    """Returns the per-token traces of a training directory (``run_dir``): one JSON line per traced rollout of
    the first and the last optimizer step (``training.token_trace``, written when ``token_trace`` > 0)."""
    return Path(run) / "token_traces.jsonl"
