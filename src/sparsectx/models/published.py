"""The published checkpoint files the project keeps (``sparsectx/assets/published/<checkpoint>/``).

Each folder holds a checkpoint's ``config.json``, ``preprocessor_config.json`` and ``tokenizer_config.json``
(its chat template) in the Hub's own layout, named as on the Hub; ``SOURCES.md`` there cites where every file
came from. The plan reads the architecture from them (``sparsectx.plan``), the rehearsal builds its tiny
random-weight instances from them (``sparsectx.rehearsal``), and the tests check the families against them.
A model preset (``conf/model/<name>.yaml``) finds its folder by the last part of its hub id (``path``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from sparsectx.paths import CONF_DIR

PUBLISHED_DIR = Path(__file__).resolve().parents[1] / "assets" / "published"
"""The folder of published checkpoint files, one subfolder per checkpoint."""
MODEL_CONF_DIR = CONF_DIR / "model"
"""The model presets (``conf/model/<name>.yaml``); their ``path`` is the checkpoint's hub id."""


def model_hub_id(model: str) -> str:
    """Returns the hub id (``path``) of model preset ``conf/model/<model>.yaml``.

    Raises:
        FileNotFoundError: no such preset; names the presets there are.
    """
    preset = MODEL_CONF_DIR / f"{model}.yaml"
    if not preset.is_file():
        known = sorted(p.stem for p in MODEL_CONF_DIR.glob("*.yaml"))
        raise FileNotFoundError(f"model={model!r}: no preset {preset}; model presets: {', '.join(known)}")
    return str(yaml.safe_load(preset.read_text())["path"])


def published_folder(hub_id: str) -> Path:
    """Returns the kept files of the checkpoint ``hub_id`` (``Qwen/Qwen2.5-VL-7B-Instruct``, or its last part).

    Raises:
        FileNotFoundError: No folder of that name is kept; names the folders that are.
    """
    folder = PUBLISHED_DIR / hub_id.rstrip("/").rsplit("/", 1)[-1]
    if not (folder / "config.json").is_file():
        kept = sorted(p.name for p in PUBLISHED_DIR.iterdir() if (p / "config.json").is_file())
        raise FileNotFoundError(
            f"no published files of {hub_id!r} under {PUBLISHED_DIR} (kept: {kept}); add the checkpoint's "
            "config.json, preprocessor_config.json and tokenizer_config.json there, with their sources in SOURCES.md"
        )
    return folder


def published_config(hub_id: str) -> dict[str, Any]:
    """Returns the published ``config.json`` of ``hub_id`` as a mapping."""
    return json.loads((published_folder(hub_id) / "config.json").read_text())
