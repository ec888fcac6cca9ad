"""A training file checked as the trainer reads it, and the recipes that build it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparsectx.data.tsv import missing_columns, read_tsv
from sparsectx.preflight.benchmark import header
from sparsectx.preflight.report import Checked


def training_recipes(path: str, conf_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """Returns (recipe name, its ``training_set`` block) of each ``conf/data/sources`` recipe writing ``path``."""
    import yaml

    found = []
    for recipe in sorted((conf_dir / "data" / "sources").glob("*.yaml")):
        block = (yaml.safe_load(recipe.read_text()) or {}).get("training_set") or {}
        if block.get("out_path") == path:
            found.append((recipe.stem, block))
    return found


def check_train_file(path: str, max_skip_fraction: float, conf_dir: Path) -> Checked:
    """Returns what a training TSV holds and its problems: missing, a missing column, or more unusable rows
    than ``train_data.max_skip_fraction`` (the trainer refuses the file beyond it)."""
    checked = Checked("training file", Path(path).name, path)
    file = Path(path)
    if not file.is_file():
        recipes = training_recipes(path, conf_dir)
        how = " or ".join(f"`python src/build_data.py data/sources={name}`" for name, _ in recipes)
        checked.add(
            path,
            "training file not found",
            f"build it with {how or 'the recipe that writes it'} "
            "(python src/preflight.py --list names its downloads), or set train_data.path to it",
        )
        return checked
    columns = header(file)
    for column in [*missing_columns(columns), *(["trace"] if "trace" not in columns else [])]:
        checked.add(path, f"no column {column!r}", "rebuild it with python src/build_data.py", column=column)
    if checked.problems:
        return checked
    items, skips = read_tsv(file)
    total = len(items) + len(skips)
    if len(skips) > max_skip_fraction * total:
        for skip in skips[:5]:
            checked.add(
                path,
                f"{skip.reason} ({len(skips)} of {total} rows unusable, above "
                f"train_data.max_skip_fraction={max_skip_fraction})",
                "rebuild the file",
                skip.index,
            )
    checked.facts.append(f"{len(items)} usable rows ({len(skips)} unusable)")
    return checked
