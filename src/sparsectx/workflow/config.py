"""The Snakemake config: which preset it names, the preset's grid merged with the user's keys, the schema check.

Nothing here knows what a cell is; ``sparsectx.workflow.grid`` expands the checked grid.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sparsectx.paths import CONF_DIR  # Hydra's config folder; re-exported as sparsectx.workflow.CONF_DIR

REPO_DIR = Path(__file__).resolve().parents[3]
"""The checkout: the Snakefile, ``workflow/`` and ``src/*.py`` that a study's DAG runs are there, not in a wheel."""
SCHEMA_PATH = (Path(__file__).resolve().parent / "schemas" / "config.schema.yaml").resolve()
"""The grid's schema, ``workflow/schemas/`` of the checkout (the package's ``sparsectx/workflow/schemas`` links to
it; a wheel ships a copy, which ``make_tables`` reads)."""


def load_yaml(path: Path) -> Any:
    """Returns the parsed YAML file at ``path``."""
    with open(path) as f:
        return yaml.safe_load(f)


def resolve_config(config: Mapping[str, Any], conf_dir: str | Path = CONF_DIR) -> dict[str, Any]:
    """Returns the Snakemake config with ``grid`` set to the experiment preset's grid.

    Keys of ``config["grid"]`` (e.g. from ``--configfile``) replace the preset's keys of the same name
    whole, without a deep merge, so a reduced test grid never inherits stray tables.

    Args:
        config: ``experiment`` (a ``conf/experiment`` stem), ``grid`` (replacement keys) and
            ``hydra_overrides`` (stage -> extra Hydra overrides).
        conf_dir: Hydra's config directory.
    """
    experiment = config.get("experiment")
    folder = Path(conf_dir) / "experiment"
    path = folder / f"{experiment}.yaml"
    if not isinstance(experiment, str) or not path.is_file():
        known = sorted(p.stem for p in folder.glob("*.yaml"))
        raise ValueError(f"config experiment={experiment!r} has no preset {path}; available: {known}")
    preset = load_yaml(path) or {}
    if not isinstance(preset.get("grid"), dict):
        raise ValueError(f"{path} has no `grid:` mapping; every experiment preset declares its grid")
    return {**config, "grid": {**preset["grid"], **(config.get("grid") or {})}}


def validate_config(config: Mapping[str, Any], schema_path: Path = SCHEMA_PATH) -> None:
    """Returns None if ``config`` matches the workflow schema; else raises ``ValueError`` naming each key."""
    validator = jsonschema.Draft202012Validator(load_yaml(schema_path))
    errors = sorted(validator.iter_errors(dict(config)), key=lambda e: list(map(str, e.path)))
    if errors:
        lines = [f"config.{'.'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors]
        raise ValueError(f"workflow config does not match {schema_path}:\n  " + "\n  ".join(lines))
