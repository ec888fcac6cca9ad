"""The base model a published folder names, checked to be the very checkpoint the run trained on.

A card's ``base_model`` and an adapter's ``base_model_name_or_path`` (``adapter_config.json``) tell a reader which
weights to load under the published ones. peft checks nothing more than module names and shapes
(``peft_model.PeftModel.from_pretrained`` -> ``load_adapter`` -> ``utils.save_and_load.set_peft_model_state_dict``,
which calls ``load_state_dict(..., strict=False)``): another checkpoint of the same architecture takes the adapter
without a word, and so would a reader of a card naming it. So a named base is accepted only when it holds the
checkpoint the run recorded (``sparsectx_training.json``'s ``base_model.snapshot``), or byte-equal weights and
config under another name (a hub copy of a local base); a refusal says what peft itself would have done with it
(``peft_verdict``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from huggingface_hub import constants
from peft import PeftConfig
from peft.tuners.tuners_utils import check_target_module_exists
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForImageTextToText

from sparsectx.checkpoints import weight_files
from sparsectx.export.config import ExportRefusedError
from sparsectx.hashing import files_sha256
from sparsectx.models.loading import hub_commit, is_hub_id, resolve_model_path, snapshot_identity
from sparsectx.training.lora_export import PEFT_PREFIX
from sparsectx.training.model_card import ADAPTER, BaseModel

ADAPTER_WEIGHTS = "adapter_model.safetensors"
"""The adapter's weight file as ``PeftModel.save_pretrained`` writes it (peft
``utils.constants.SAFETENSORS_WEIGHTS_NAME``)."""
SHOWN = 3
"""Module names quoted in a verdict; the rest are counted."""


def published_base(source: Path, kind: str, recorded: BaseModel, named: str | None, to_hub: bool) -> BaseModel:
    """Returns the base model the published folder names: the recorded one, or ``named`` once checked to be it.

    Args:
        source: the folder published (``adapter/`` or ``checkpoint/``), named in refusals.
        kind: ``ADAPTER`` or ``MERGED`` (``model_card``); an adapter's refusal says what peft would do.
        recorded: the base the run trained on (``sparsectx_training.json``'s ``base_model``).
        named: ``base_model`` of ``conf/export.yaml``; None = the recorded one.
        to_hub: the folder goes to the Hub, whose cards link ``base_model`` to a repository: a hub id is needed.

    Raises:
        ExportRefusedError: the Hub would get a local folder as base; ``named`` is not at hand (a hub id not in
            the local Hugging Face cache, a folder without ``config.json``); or it holds other weights than the run
            trained on (naming both snapshots, what peft would do with it, and what to pass instead).
    """
    if named is None or named == recorded.name_or_path:
        if to_hub and not is_hub_id(recorded.name_or_path):
            raise ExportRefusedError(
                f"{source} was trained on the local folder {recorded.name_or_path}, but a card on the Hub names its "
                "base by hub id (the Hub links base_model to that repository): pass base_model=<org/name> of that "
                "checkpoint on the Hub (in the local Hugging Face cache, `hf download <org/name>`, so that export "
                "can check it holds the same weights), or export to=local"
            )
        return recorded
    if to_hub and not is_hub_id(named):
        raise ExportRefusedError(
            f"base_model={named} is a local folder, but a card on the Hub names its base by hub id: pass "
            f"base_model=<org/name> of {recorded.name_or_path} on the Hub, or export to=local"
        )
    folder = Path(_local_folder(named))
    found = snapshot_identity(folder)
    if found == recorded.snapshot or _same_checkpoint(recorded, folder):
        return BaseModel(named if is_hub_id(named) else str(folder.absolute()), hub_commit(folder), found)
    if kind == ADAPTER:
        consequence = peft_verdict(source, folder)
    else:
        consequence = "the card would name a model this checkpoint was not fine-tuned from"
    raise ExportRefusedError(
        f"{source} was trained on {recorded.name_or_path} (snapshot {recorded.snapshot}), but base_model={named} "
        f"is snapshot {found} ({folder}), other weights: {consequence}. Pass base_model=<a hub id or folder "
        f"holding {recorded.name_or_path}'s very weights>, or leave base_model unset to name "
        f"{recorded.name_or_path}"
    )


def _local_folder(named: str) -> str:
    """Returns the local folder of ``named`` (a folder, or a hub id in the local Hugging Face cache; nothing is
    downloaded); raises ``ExportRefusedError`` naming the download command or the missing file."""
    try:
        return resolve_model_path(named, None, local_files_only=True)
    except FileNotFoundError as err:
        if is_hub_id(named):
            raise ExportRefusedError(
                f"base_model={named} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}): export "
                f"compares its files with the checkpoint the run trained on before naming it; `hf download {named}` "
                "first, or leave base_model unset"
            ) from err
        raise ExportRefusedError(f"base_model={named} holds no checkpoint (no config.json there): {err}") from err


def _same_checkpoint(recorded: BaseModel, folder: Path) -> bool:
    """Returns whether ``folder`` holds the recorded base's weights (equal sha256, file by file) and config under
    another name: a hub copy of a local base has another snapshot identity (its commit, and the files the Hub
    adds) for the same model. False when the recorded base is not at hand as recorded."""
    try:
        trained = Path(resolve_model_path(recorded.name_or_path, recorded.revision, local_files_only=True))
    except FileNotFoundError:
        return False
    if snapshot_identity(trained) != recorded.snapshot:
        return False
    ours, theirs = weight_files(trained), weight_files(folder)
    if not ours or [p.name for p in ours] != [p.name for p in theirs]:
        return False
    configs = [json.loads((root / "config.json").read_text(encoding="utf-8")) for root in (trained, folder)]
    return configs[0] == configs[1] and files_sha256(ours) == files_sha256(theirs)


def peft_verdict(adapter_dir: Path, base_folder: Path) -> str:
    """Returns what ``PeftModel.from_pretrained(<the model in base_folder>, adapter_dir)`` would do, in words.

    The base is built on the meta device (no weights read) and each LoRA pair of ``adapter_model.safetensors``
    (keys ``base_model.model.<module>.lora_{A,B}.weight``, shapes ``[r, in]`` and ``[out, r]``) is matched to the
    base's module, as peft's loader does: a shape that differs fails ``load_state_dict`` (peft raises "size
    mismatch"); a module the base lacks has its weights dropped without a message (``strict=False``); a base
    module the adapter's ``target_modules`` select (peft ``tuners_utils.check_target_module_exists``) with no
    weights in the file gets a fresh, untrained LoRA, with peft's warning "Found missing adapter keys"
    (``PeftModel.from_pretrained``); otherwise peft accepts the base silently.
    """
    config = AutoConfig.from_pretrained(base_folder)
    try:
        with torch.device("meta"):
            model = AutoModelForImageTextToText.from_config(config)
    except ValueError as err:
        return f"transformers cannot build it as an image-text-to-text model ({err}), so peft has nothing to load onto"
    modules = dict(model.named_modules())
    adapted: dict[str, tuple[int, int]] = {}  # module -> (out, in) the adapter was trained for
    with safe_open(str(adapter_dir / ADAPTER_WEIGHTS), framework="pt") as weights:
        for key in weights.keys():  # noqa: SIM118 (safe_open is no mapping)
            module, _, matrix = key.removeprefix(PEFT_PREFIX).rpartition(".lora_")
            shape = weights.get_slice(key).get_shape()
            out, inner = adapted.get(module, (0, 0))
            adapted[module] = (out, shape[1]) if matrix.startswith("A.") else (shape[0], inner)
    mismatched = [
        f"{name} (adapter {out}x{inner}, base {'x'.join(map(str, _weight_shape(modules[name]))) or 'no weight'})"
        for name, (out, inner) in adapted.items()
        if name in modules and _weight_shape(modules[name]) != (out, inner)
    ]
    if mismatched:
        return f"peft refuses it too, with a size mismatch in load_state_dict: {_listed(mismatched)}"
    absent = [name for name in adapted if name not in modules]
    if absent:
        return (
            f"peft would load it silently, dropping the adapter's weights of modules the base lacks: {_listed(absent)}"
        )
    peft_config = PeftConfig.from_pretrained(str(adapter_dir))
    untrained = [
        name
        for name, module in modules.items()
        if isinstance(module, torch.nn.Linear) and name not in adapted and check_target_module_exists(peft_config, name)
    ]
    if untrained:
        return (
            "peft would load it with only a warning ('Found missing adapter keys') and an untrained LoRA on "
            f"modules the adapter has no weights for: {_listed(untrained)}"
        )
    return "peft would load it silently: PeftModel.from_pretrained checks only module names and shapes, which match"


def _weight_shape(module: torch.nn.Module) -> tuple[int, ...]:
    """Returns the shape of a module's ``weight`` (``(out, in)`` for the linear layers LoRA adapts; ``()`` for a
    module without one)."""
    weight = getattr(module, "weight", None)
    return tuple(weight.shape) if isinstance(weight, torch.Tensor) else ()


def _listed(names: list[str]) -> str:
    """Returns the first ``SHOWN`` of ``names`` and how many more there are."""
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more
