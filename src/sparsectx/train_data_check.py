"""A real model is refused the tiny synthetic training set: ``python src/train.py model=qwen2_5_vl_7b`` would
otherwise train a 7B model on 448-px drawings of shapes (``train_data.path: ${data.out_dir}/train.tsv`` of the
synthetic suite, ``conf/data/tiny.yaml``), since only the Snakemake presets switch to the papers' files.

Both sides are recognised from what the configs carry, not from the words in a path:
- the tiny training set: the data preset is the synthetic suite (``data.name``, ``SYNTHETIC_SUITES``) and
  ``train_data.path`` is that suite's own training split, ``<data.out_dir>/train.tsv`` (what
  ``sparsectx.data.synthetic.build_suite`` writes; the pipeline's ``data/tiny-<digest>/`` copy included);
- a tiny model: its checkpoint ships with the package (``model.path: package:<dir>``), or its preset's does
  (``conf/model/<model.name>.yaml``: ``model=tiny model.path=<a trained tiny checkpoint>`` trains further). Any
  other model is a real one.

This module imports no torch, so an entry point can run the check before the heavy imports; ``load_train_config``
(``sparsectx.training.config``) runs it on every training config.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import DictConfig

from sparsectx.workflow.config import CONF_DIR

SYNTHETIC_SUITES = ("tiny",)
"""``data.name`` of the data presets that are the synthetic suite (``conf/data/tiny.yaml``), drawn for the tiny
models."""
SUITE_TRAIN_FILE = "train.tsv"
"""The synthetic suite's training split inside ``data.out_dir`` (``sparsectx.data.synthetic.build_suite``)."""
SHIPPED_PREFIX = "package:"
"""``model.path`` of a checkpoint shipped in ``sparsectx/assets`` (``sparsectx.models.loading.PACKAGE_PREFIX``, not
imported: that module imports torch)."""


def check_training_data(cfg: DictConfig) -> None:
    """Returns None unless a real model would train on the tiny synthetic training set.

    Raises:
        ValueError: naming ``model=`` and ``train_data.path=`` as composed, and the overrides to type: each real
            training file a build recipe writes (``conf/data/sources``) and ``train_data.path=<your file>``.
    """
    if not on_synthetic_training_split(cfg) or is_tiny_model(cfg.model):
        return
    raise ValueError(
        f"model={cfg.model.name} would train on the synthetic suite's training split (train_data.path="
        f"{cfg.train_data.path}, data={cfg.data.name}: drawings of shapes made for the tiny models); a real model "
        f"trains on a real training file: {'; '.join(real_training_files())}; or train_data.path=<your file> "
        "(a VLMEvalKit-layout TSV: docs/training_data.md)"
    )


def on_synthetic_training_split(cfg: DictConfig) -> bool:
    """Returns whether ``train_data.path`` is the training split of a synthetic-suite data preset."""
    if cfg.data.name not in SYNTHETIC_SUITES:
        return False
    split = Path(cfg.data.out_dir, SUITE_TRAIN_FILE).expanduser().resolve()
    return Path(cfg.train_data.path).expanduser().resolve() == split


def is_tiny_model(model: DictConfig) -> bool:
    """Returns whether ``model`` is a tiny model: its checkpoint, or its preset's, ships with the package."""
    if str(model.path).startswith(SHIPPED_PREFIX):
        return True
    preset = CONF_DIR / "model" / f"{model.name}.yaml"
    return preset.is_file() and str(yaml.safe_load(preset.read_text()).get("path", "")).startswith(SHIPPED_PREFIX)


def real_training_files() -> list[str]:
    """Returns one entry per real training file a build recipe writes (``conf/data/sources/*.yaml``'s
    ``training_set.out_path``): ``train_data.path=<file>``, the recipes that build it and the study presets
    that train on it (``conf/experiment/*.yaml``'s ``grid.overrides.train``)."""
    recipes: dict[str, list[str]] = {}
    for path in sorted((CONF_DIR / "data" / "sources").glob("*.yaml")):
        recipes.setdefault(yaml.safe_load(path.read_text())["training_set"]["out_path"], []).append(path.stem)
    studies: dict[str, list[str]] = {}
    for path in sorted((CONF_DIR / "experiment").glob("*.yaml")):
        grid = yaml.safe_load(path.read_text()).get("grid") or {}
        for override in (grid.get("overrides") or {}).get("train") or []:
            key, _, value = str(override).partition("=")
            if key == "train_data.path":
                studies.setdefault(value, []).append(path.stem)
    entries = []
    for out_path, names in recipes.items():
        built = " or ".join(f"python src/build_data.py data/sources={name}" for name in names)
        used = ", ".join(f"experiment={study}" for study in studies.get(out_path, []))
        entries.append(f"train_data.path={out_path} (built by {built}{'; trained on by ' + used if used else ''})")
    return entries
