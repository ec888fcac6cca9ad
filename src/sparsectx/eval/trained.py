"""Which training method a checkpoint holds, from its own record (so its results land in its own leaf).

``python src/train.py`` writes ``<run_dir>/checkpoint/sparsectx_training.json`` (config hash, steps, git)
and ``<run_dir>/config.yaml`` (the resolved training config: ``method.name``, ``pruner.name``, ``budget``,
``seed``). Evaluating such a checkpoint without ``method=`` takes the method from that record; evaluating
it with a conflicting ``method=`` is an error; a trained checkpoint is never written under ``base``. The names the
record gives (method, pruner, experiment, model) are checked as path components (``sparsectx.paths.path_name``):
a checkpoint is a file from elsewhere, and its ``config.yaml`` must not lead a write outside the results tree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sparsectx.paths import BASE, CHECKPOINT_INFO, path_name
from sparsectx.run_tags import run_label

RUN_CONFIG = "config.yaml"
"""The resolved training config, beside ``checkpoint/`` in the run directory."""
RECORD_NAMES = {
    "method": "method.name",
    "run_tag": "run_tag",
    "pruner": "pruner.name",
    "experiment": "experiment",
    "model": "model.name",
}
"""The record's names that become output path components, by the training config key they are read from."""


def training_record(checkpoint: str | Path | None) -> dict[str, Any] | None:
    """Returns the training run of a checkpoint (method, pruner, budget, seed, experiment, model, config hash,
    steps), or None when ``checkpoint`` is unset or not one of our trained checkpoints (no
    ``sparsectx_training.json``: a hub or pretrained model directory).

    ``method`` etc. are None when the run directory's ``config.yaml`` is absent (a checkpoint copied away).

    Raises:
        ValueError: a record file is not a mapping, or a name it gives is not a plain path component.
    """
    if checkpoint is None:
        return None
    directory = Path(checkpoint)
    info_path = directory / CHECKPOINT_INFO
    if not info_path.is_file():
        return None
    info = _mapping(info_path)
    record: dict[str, Any] = {key: info.get(key) for key in ("config_hash", "steps", "samples_seen")}
    config_path = directory.parent / RUN_CONFIG
    train = _mapping(config_path) if config_path.is_file() else {}
    record.update(
        method=_section_name(train, "method", config_path),
        pruner=_section_name(train, "pruner", config_path),
        budget=train.get("budget"),
        seed=train.get("seed"),
        run_tag=train.get("run_tag") or None,
        experiment=train.get("experiment"),
        model=_section_name(train, "model", config_path),
        run_config=str(config_path) if train else None,
    )
    untrusted = (
        f"{config_path} is not the config train.py wrote for this checkpoint: evaluate only checkpoints you "
        "trust; restore that file from the run that trained it, or delete it and pass method=<the method "
        "that trained it>"
    )
    for field, key in RECORD_NAMES.items():
        if record[field] is not None:
            path_name(record[field], key, str(config_path), untrusted)
    return record


def _mapping(path: Path) -> dict[str, Any]:
    """Returns the YAML (or JSON) mapping in ``path``; raises ValueError naming the file when it holds another
    kind of value."""
    content = OmegaConf.to_container(OmegaConf.load(path))  # JSON is YAML
    if not isinstance(content, dict):
        raise ValueError(
            f"{path} holds a {type(content).__name__}, not the mapping a trained checkpoint's record is; "
            "rerun the training that wrote it, or evaluate another checkpoint"
        )
    return content


def _section_name(train: dict[str, Any], section: str, config_path: Path) -> Any:
    """Returns ``train[section]["name"]`` (None when the section is absent); raises ValueError naming the file
    when the section is not a mapping."""
    block = train.get(section)
    if block is None:
        return None
    if not isinstance(block, dict):
        raise ValueError(f"{config_path}: {section}={block!r} is not a mapping with a 'name' (as train.py writes it)")
    return block.get("name")


def leaf_method(method: str, checkpoint: str | Path | None) -> str:
    """Returns the method component of the results leaf: the checkpoint's trained method (with its run's tag,
    ``<method>+<tag>``, ``sparsectx.run_tags``), else ``method``.

    It is also the ``leaf_method`` resolver of ``hydra.run.dir`` (``conf/evaluate.yaml``), which Hydra resolves
    before any config check, so a name that is no plain path component fails here.

    Raises:
        ValueError: ``method=`` names another method than the checkpoint's record, a trained checkpoint's
            run directory has no ``config.yaml`` and no ``method=`` says which method trained it, or a method
            name (the config's or the record's) is not a plain path component.
    """
    path_name(method, "method.name")
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
    return run_label(trained, record["run_tag"] or "")
