"""Which training method a checkpoint holds, from its own record (so its results land in its own leaf).

``python src/train.py`` writes ``<run_dir>/checkpoint/sparsectx_training.json`` (config hash, steps, git)
and ``<run_dir>/config.yaml`` (the resolved training config: ``method.name``, ``pruner.name``, ``budget``,
``seed``). Evaluating such a checkpoint without ``method=`` takes the method from that record; evaluating
it with a conflicting ``method=`` is an error; a trained checkpoint is never written under ``base``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

BASE = "base"
"""``method.name`` of the untrained model (``conf/evaluate.yaml``'s default)."""
CHECKPOINT_INFO = "sparsectx_training.json"
"""The record ``sparsectx.training.checkpoint.save_checkpoint`` writes into every trained checkpoint."""
RUN_CONFIG = "config.yaml"
"""The resolved training config, beside ``checkpoint/`` in the run directory."""


def training_record(checkpoint: str | Path | None) -> dict[str, Any] | None:
    """Returns the training run of a checkpoint (method, pruner, budget, seed, experiment, model, config hash,
    steps), or None when ``checkpoint`` is unset or not one of our trained checkpoints (no
    ``sparsectx_training.json``: a hub or pretrained model directory).

    ``method`` etc. are None when the run directory's ``config.yaml`` is absent (a checkpoint copied away).
    """
    if checkpoint is None:
        return None
    directory = Path(checkpoint)
    info_path = directory / CHECKPOINT_INFO
    if not info_path.is_file():
        return None
    info = OmegaConf.to_container(OmegaConf.load(info_path))  # JSON is YAML
    record: dict[str, Any] = {key: info.get(key) for key in ("config_hash", "steps", "samples_seen")}  # type: ignore[union-attr]
    config_path = directory.parent / RUN_CONFIG
    train: dict[str, Any] = {}
    if config_path.is_file():
        train = OmegaConf.to_container(OmegaConf.load(config_path))  # type: ignore[assignment]
    record.update(
        method=(train.get("method") or {}).get("name"),
        pruner=(train.get("pruner") or {}).get("name"),
        budget=train.get("budget"),
        seed=train.get("seed"),
        experiment=train.get("experiment"),
        model=(train.get("model") or {}).get("name"),
        run_config=str(config_path) if train else None,
    )
    return record


def leaf_method(method: str, checkpoint: str | Path | None) -> str:
    """Returns the method component of the results leaf: the checkpoint's trained method, else ``method``.

    Raises:
        ValueError: ``method=`` names another method than the checkpoint's record, or a trained checkpoint's
            run directory has no ``config.yaml`` and no ``method=`` says which method trained it.
    """
    record = training_record(checkpoint)
    if record is None:
        return method
    trained = record["method"]
    if trained is None:
        if method == BASE:
            raise ValueError(
                f"checkpoint={checkpoint} is a trained checkpoint, but {Path(checkpoint).parent / RUN_CONFIG} "  # type: ignore[arg-type]
                "(its training config) is missing, so its method is unknown; pass method=<the method that "
                "trained it>, e.g. method=scopd (its results must not land in the untrained model's base leaf)"
            )
        return method
    if method not in (BASE, trained):
        raise ValueError(
            f"method={method} conflicts with checkpoint={checkpoint}, which was trained with method={trained} "
            f"(recorded in {record['run_config']}); drop method= (the checkpoint names its method) or pass "
            f"method={trained}"
        )
    return trained
