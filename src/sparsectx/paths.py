"""Output paths as pure functions of the config: one results leaf per (experiment, model, method, pruner,
budget, benchmark), one training directory per (experiment, model, method, pruner, budget)."""

from __future__ import annotations

from pathlib import Path


def budget_tag(budget: float) -> str:
    """Returns the path spelling of a budget fraction: 0.1 -> "0.1", 1.0 -> "1"."""
    return f"{budget:g}"


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
