"""``python src/export.py``: check everything (``plan_export``), then push the folder to the Hub or write it locally
(``export``).

The folder is published as training wrote it, with three files refreshed: the model card (``README.md``: the base
as published, the evaluation table when scores are known), an adapter's ``adapter_config.json`` when the base is
published under another name (``base_model_name_or_path``, ``revision``: what peft and transformers load under it),
and ``sparsectx_training.json`` (the base as published, the one trained on as ``base_model_as_trained``, and every
file's sha256 again, so ``evaluate.py`` and ``load_lora_adapter`` verify the published copy as they verify the run's).
The run's own folders are never changed: evaluation results are keyed by the checkpoint's identity, which its card
is part of (``loading.snapshot_identity``).

The Hub is reached through huggingface_hub's ``HfApi``: ``create_repo(exist_ok=True)`` then one ``upload_folder``
commit (``hf_api.HfApi.create_repo``, ``HfApi.upload_folder``), with the token huggingface_hub finds itself
(``utils._auth.get_token``: ``HF_TOKEN``, then the token file ``hf auth login`` writes).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, ModelCard
from omegaconf import DictConfig

from sparsectx.checkpoints import (
    CHECKPOINT_INFO,
    DamagedFileError,
    discarded_on_error,
    fresh_tmp,
    replace_dir,
    verify_checkpoint,
)
from sparsectx.export.base import published_base
from sparsectx.export.config import ExportConfig, ExportRefusedError, check_destination, load_export_config
from sparsectx.export.evaluations import checkpoint_evaluations
from sparsectx.hashing import file_sha256
from sparsectx.io import atomic_write_json, naming_full_disk, read_json_object
from sparsectx.paths import budget_tag
from sparsectx.training.lora_export import ADAPTER_DIR
from sparsectx.training.model_card import ADAPTER, CARD_FILE, MERGED, BaseModel, render_card

CHECKPOINT_DIR = "checkpoint"
"""The merged or full model's folder in the run directory (``training.loop``'s final save)."""
ADAPTER_CONFIG = "adapter_config.json"
"""The adapter's ``LoraConfig`` as ``PeftModel.save_pretrained`` writes it (peft ``utils.constants.CONFIG_NAME``)."""
KINDS = {ADAPTER_DIR: ADAPTER, CHECKPOINT_DIR: MERGED}
"""The run directory's model folders and the card each gets (``model_card.render_card``)."""

Place = Callable[[Path, Path], None]
"""Puts the file at its first argument at its second (a link or a copy)."""


@dataclass(frozen=True)
class ExportPlan:
    """A checked export: everything the writing needs, found before anything is written."""

    config: ExportConfig
    source: Path
    """The folder published (``<run_dir>/adapter`` or ``<run_dir>/checkpoint``), verified against its sha256."""
    record: dict[str, Any]
    """Its ``sparsectx_training.json``."""
    base: BaseModel
    """The base model the published folder names."""
    card: str
    """The refreshed model card."""
    scores: int
    """Evaluation results on the card."""


def run(cfg: DictConfig) -> str:
    """Returns what was published where, after ``plan_export`` and ``export`` of the composed config."""
    return export(plan_export(load_export_config(cfg)))


def plan_export(config: ExportConfig) -> ExportPlan:
    """Returns the checked export; nothing is written or sent.

    Raises:
        ExportRefusedError: the Hub is unreachable as configured (offline mode, no token), ``local_dir`` is not empty,
            the run has not finished or has no such folder, the folder predates model cards, or the base model
            named is not the one the run trained on (``base.published_base``); each naming what to do.
        DamagedFileError: a file of the folder is missing, added or differs from its recorded sha256.
        ValueError: a result file of the run's evaluations is unreadable (``evaluations.checkpoint_evaluations``).
    """
    check_destination(config)
    source = finished_folder(Path(config.run_dir), config.folder)
    fix = f"rerun the training command that wrote {source.parent} (it rewrites {source.name}/ from state/)"
    record = read_json_object(source / CHECKPOINT_INFO, fix, DamagedFileError)
    if not isinstance(record.get("training"), dict) or not isinstance(record.get("base_model"), dict):
        raise ExportRefusedError(
            f"{source / CHECKPOINT_INFO} records no training facts or base model: {source} was written before model "
            f"cards were; delete {source} and rerun the training command that wrote it (it rewrites the folder from "
            "state/ without training again)"
        )
    if not verify_checkpoint(source):  # every file against its sha256; a damaged one raises naming it
        raise ExportRefusedError(f"{source} records no sha256 of its files, so no copy of it can be checked; {fix}")
    kind = KINDS[source.name]
    base = published_base(source, kind, BaseModel(**record["base_model"]), config.base_model, config.to == "hub")
    checkpoint = source.parent / CHECKPOINT_DIR  # evaluate.py scores only the merged model, even for an adapter
    evaluated = config.evaluation and (checkpoint / CHECKPOINT_INFO).is_file()
    evaluations = checkpoint_evaluations(config.results_root, checkpoint) if evaluated else []
    card = render_card(kind, base, _facts_in_card_order(source, record["training"]), evaluations)
    return ExportPlan(config, source, record, base, card, len(evaluations))


def _facts_in_card_order(source: Path, facts: dict[str, Any]) -> dict[str, Any]:
    """Returns the training facts in the order the folder's card lists them (``model_card.training_facts``'
    order, which the JSON record loses: it sorts its keys), read with huggingface_hub's parser (``ModelCard.load``;
    the card is one of the files ``verify_checkpoint`` checked)."""
    listed = ModelCard.load(source / CARD_FILE).data.to_dict().get("sparsectx") or {}
    return {key: facts[key] for key in listed if key in facts} | facts


def finished_folder(run_dir: Path, folder: str) -> Path:
    """Returns the run's folder to publish (``folder``: ``adapter``, ``checkpoint`` or ``auto``, the adapter when
    the run has one); raises ``ExportRefusedError`` when the run has not finished or lacks that folder, naming the
    fix."""
    if not run_dir.is_dir():
        raise ExportRefusedError(
            f"run_dir={run_dir} does not exist: pass the run directory train.py wrote "
            "(runs/<experiment>/<model>/<method>/<pruner>/<budget>)"
        )
    finished = [name for name in KINDS if (run_dir / name / CHECKPOINT_INFO).is_file()]
    if not finished:
        raise ExportRefusedError(
            f"run_dir={run_dir} has not finished: it holds no adapter/ or checkpoint/ with {CHECKPOINT_INFO}; "
            "rerun its training command (it resumes from state/) and export once it has finished"
        )
    if folder == "auto":
        return run_dir / finished[0]
    if folder not in finished:
        fix = {
            ADAPTER_DIR: "the run trained all its weights (or predates adapters): folder=checkpoint publishes it",
            CHECKPOINT_DIR: "rerun its training command with save_merged=true (it writes checkpoint/ from state/ "
            "without training), or publish folder=adapter",
        }[folder]
        raise ExportRefusedError(f"run_dir={run_dir} has no {folder}/: {fix}")
    return run_dir / folder


def export(plan: ExportPlan) -> str:
    """Returns what was published where, after pushing the planned folder to the Hub or writing it locally."""
    config = plan.config
    if config.to == "local":
        target = Path(config.local_dir)  # type: ignore[arg-type]
        write_folder(plan, target, _link_or_copy)
        return f"wrote {target} from {plan.source} ({_scores_on_card(plan)})"
    facts = plan.record["training"]
    message = config.commit_message or (
        f"sparsectx: {facts['model']} {facts['method']} {facts['pruner']} {budget_tag(facts['budget'])}"
    )
    api = HfApi()
    url = api.create_repo(config.repo_id, private=config.private, exist_ok=True, repo_type="model")  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory(prefix="sparsectx-export-") as staging:
        folder = Path(staging) / "folder"
        write_folder(plan, folder, _symlink)
        api.upload_folder(repo_id=config.repo_id, folder_path=folder, commit_message=message, repo_type="model")  # type: ignore[arg-type]
    return f"pushed {plan.source} to {url} ({_scores_on_card(plan)})"


def _scores_on_card(plan: ExportPlan) -> str:
    """Returns how many evaluation scores the published card lists, in words."""
    return f"its model card lists {plan.scores} evaluation score{'' if plan.scores == 1 else 's'}"


def write_folder(plan: ExportPlan, target: Path, place: Place) -> None:
    """Returns None after writing the published folder at ``target`` (atomically: a failure leaves no part of it).

    Every file of the source is placed by ``place`` except the three refreshed ones (module docstring); the
    record's ``files_sha256`` keeps the verified digests of the placed files and adds the new ones', so nothing is
    hashed twice.
    """
    recorded = BaseModel(**plan.record["base_model"])
    rewritten = {CARD_FILE: plan.card}
    if KINDS[plan.source.name] == ADAPTER and plan.base != recorded:
        rewritten[ADAPTER_CONFIG] = _adapter_config(plan.source / ADAPTER_CONFIG, plan.base)
    info = {key: value for key, value in plan.record.items() if key != "files_sha256"}
    if plan.base != recorded:
        info.update(base_model=plan.base.as_record(), base_model_as_trained=recorded.as_record())
    digests = dict(plan.record["files_sha256"])
    tmp = fresh_tmp(target)
    with discarded_on_error(tmp), naming_full_disk(tmp, f"{target} was not written"):
        for name in digests:
            if name not in rewritten:
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                place(plan.source / name, tmp / name)
        for name, text in rewritten.items():
            (tmp / name).write_text(text, encoding="utf-8")
            digests[name] = file_sha256(tmp / name)
        atomic_write_json(tmp / CHECKPOINT_INFO, {**info, "files_sha256": digests})
    replace_dir(tmp, target)


def _adapter_config(path: Path, base: BaseModel) -> str:
    """Returns ``adapter_config.json`` naming ``base`` as peft reads it (``PeftConfigMixin``:
    ``base_model_name_or_path`` and ``revision``), in the layout peft writes (``PeftConfigMixin.save_pretrained``:
    indent 2, sorted keys)."""
    config = json.loads(path.read_text(encoding="utf-8"))
    config.update(base_model_name_or_path=base.name_or_path, revision=base.revision)
    return json.dumps(config, indent=2, sort_keys=True)


def _link_or_copy(source: Path, target: Path) -> None:
    """Hard-links ``source`` at ``target`` (no bytes copied on one file system), else copies it. A link is safe:
    training never rewrites a file in place (``checkpoint.save_model_dir`` swaps in whole new folders)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _symlink(source: Path, target: Path) -> None:
    """Links ``source`` at ``target`` for the upload: huggingface_hub reads the files it finds under the folder
    through links (``HfApi._prepare_upload_folder_additions``: ``path.is_file()``, then ``CommitOperationAdd``
    opens the path), so a multi-GB checkpoint is neither copied nor moved."""
    target.symlink_to(source.resolve())
