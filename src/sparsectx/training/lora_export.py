"""A LoRA run's adapter in PEFT's own layout (``<run_dir>/adapter/``), and a loader that checks its base model.

``adapter/`` holds what ``PeftModel.save_pretrained`` writes (peft ``peft_model.PeftModel.save_pretrained``):
``adapter_config.json`` (the ``LoraConfig``; ``base_model_name_or_path`` and ``revision`` name the checkpoint the
run trained from, ``model_card.base_model``) and ``adapter_model.safetensors`` (the A and B matrices, keys
``base_model.model.<module>.lora_{A,B}.weight``, fp32 as trained); then the model card ``README.md`` and
``sparsectx_training.json`` with every file's sha256 (``checkpoint.save_model_dir``). It holds no ``config.json``:
transformers takes a folder with both files for a full model with an adapter on top (transformers
``integrations.peft.maybe_load_adapters``), which would apply the adapter twice to a merged copy.

peft alone loads an adapter onto any model whose module names and shapes match, so another checkpoint of the
same architecture (an upstream update, a sibling size with equal widths) would take it without a word.
``load_lora_adapter`` refuses a base whose ``loading.snapshot_identity`` is not the one the run recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from torch.distributed.tensor import DTensor
from transformers import AutoModelForImageTextToText

from sparsectx.checkpoints import CHECKPOINT_INFO, DamagedFileError, save_model_dir, verify_checkpoint
from sparsectx.io import read_json_object
from sparsectx.models.loading import resolve_model_path, snapshot_identity
from sparsectx.training.model_card import CARD_FILE, BaseModel
from sparsectx.training.student import Student

ADAPTER_DIR = "adapter"
"""The adapter's folder in the run directory, beside ``checkpoint/``."""

PEFT_PREFIX = "base_model.model."
"""What ``PeftModel`` puts before the wrapped model's parameter names in its state dict (peft ``PeftModel``
holds ``base_model``, a ``LoraModel`` whose ``model`` is the HF model), the names ``get_peft_model_state_dict``
reads."""


def adapter_weights(student: Student) -> dict[str, torch.Tensor]:
    """Returns {PeftModel state-dict key: full CPU tensor} of the trained LoRA tensors.

    Under ``distributed.strategy=fsdp`` each is a sharded ``DTensor`` and ``full_tensor`` gathers it: every
    process must call this, as for ``sharded_state.export_sharded``. Only the adapters are gathered (MBs), never
    the base weights.
    """
    return {
        f"{PEFT_PREFIX}{name}": (param.full_tensor() if isinstance(param, DTensor) else param).detach().to("cpu")
        for name, param in student.trainable.items()
    }


def save_lora_adapter(
    target: Path, student: Student, weights: dict[str, torch.Tensor], base: BaseModel, info: dict[str, Any], card: str
) -> None:
    """Returns None after atomically writing ``target`` as PEFT's adapter folder, the card and the training record.

    Call it before ``student.export_model``: merging folds the adapters into the base weights in place.

    Args:
        target: ``<run_dir>/adapter``.
        student: the LoRA student (its ``peft`` wrapper supplies the ``LoraConfig``).
        weights: ``adapter_weights(student)``.
        base: the checkpoint trained from, written as ``base_model_name_or_path`` and ``revision``.
        info: the training record (``sparsectx_training.json``; the files' sha256 are added).
        card: the model card text (``model_card.render_card``).
    """
    peft = student.peft
    if peft is None:
        raise ValueError("a full-parameter run has no LoRA adapter to save; its checkpoint/ is the model")
    config = peft.peft_config["default"]  # apply_lora's adapter (peft get_peft_model's default adapter name)
    # peft set base_model_name_or_path to the folder it was loaded from (a cache path for a hub id); name it as
    # peft's loaders resolve it, with the revision AutoPeftModel passes on (peft config.PeftConfigMixin.revision)
    config.base_model_name_or_path, config.revision = base.name_or_path, base.revision

    def write(tmp: Path) -> None:
        # save_embedding_layers=False: the adapters never touch the embeddings and the vocabulary is never resized;
        # "auto" would look the base up on the Hub to compare vocabulary sizes (peft utils.save_and_load
        # get_peft_model_state_dict)
        peft.save_pretrained(str(tmp), state_dict=weights, save_embedding_layers=False)
        # our card goes over the generic README.md that peft's save_pretrained writes
        (tmp / CARD_FILE).write_text(card, encoding="utf-8")

    save_model_dir(target, write, info)


def load_lora_adapter(
    adapter_dir: str | Path, base: str | Path | None = None, local_files_only: bool = True, **model_kwargs: Any
) -> PeftModel:
    """Returns the adapter in ``adapter_dir`` on its base model (``PeftModel``; ``merge_and_unload`` for plain
    weights), after checking that the base is the checkpoint the adapter was trained on.

    Args:
        adapter_dir: a run's ``adapter/`` folder.
        base: the base checkpoint's folder or hub id; None = the one ``adapter_config.json`` names, at its revision.
        local_files_only: read a hub id from the local Hugging Face cache only (``model.local_files_only``).
        model_kwargs: passed to ``AutoModelForImageTextToText.from_pretrained`` (``device_map``, ...); ``dtype``
            defaults to the dtype the run trained in (``training.dtype`` of its record).

    Raises:
        DamagedFileError: a file of ``adapter_dir`` is missing, added or differs from its recorded sha256, or its
            training record is unreadable.
        ValueError: ``adapter_dir`` records no base model, or ``base`` is another checkpoint (naming both and the
            fix); raised before any weights load.
    """
    adapter_dir = Path(adapter_dir)
    fix = f"use the adapter/ folder a sparsectx training run wrote, or rerun that training to rewrite {adapter_dir}"
    if not verify_checkpoint(adapter_dir):
        raise ValueError(f"{adapter_dir} holds no {CHECKPOINT_INFO} with its files' sha256; {fix}")
    record = read_json_object(adapter_dir / CHECKPOINT_INFO, fix, DamagedFileError)
    recorded = record.get("base_model")
    if not isinstance(recorded, dict):
        raise DamagedFileError(f"{adapter_dir / CHECKPOINT_INFO} records no base_model; {fix}")
    source = str(base) if base is not None else recorded["name_or_path"]
    revision = recorded["revision"] if base is None else None
    folder = resolve_model_path(source, revision, local_files_only)
    found = snapshot_identity(folder)
    if found != recorded["snapshot"]:
        raise ValueError(
            f"{adapter_dir} was trained on {recorded['name_or_path']} (snapshot {recorded['snapshot']}), but "
            f"base={source} is snapshot {found} ({folder}): the adapter would change other weights than it was "
            f"trained with. Pass base=<the folder of {recorded['name_or_path']}>, or leave base unset to load "
            f"{recorded['name_or_path']}" + (f" at revision {recorded['revision']}" if recorded["revision"] else "")
        )
    # the weights the run trained: a checkpoint stored in bf16 and trained in fp32 (the shipped tiny model) loads
    # in bf16 under transformers' default dtype="auto" (modeling_utils.PreTrainedModel.from_pretrained), which
    # moves the logits by far more than the adapter's own rounding
    trained_dtype = record.get("training", {}).get("dtype")
    if trained_dtype is not None:
        model_kwargs.setdefault("dtype", getattr(torch, trained_dtype))
    model = AutoModelForImageTextToText.from_pretrained(folder, **model_kwargs)
    return PeftModel.from_pretrained(model, str(adapter_dir))
