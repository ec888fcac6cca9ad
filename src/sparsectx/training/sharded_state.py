"""The fsdp run's resume state and final model: shards written by every process, a normal HF export.

``state/`` of a sharded run holds ``trainer.pt`` and ``meta.json`` as under ``none`` (counters, scheduler, RNG
states, W&B id, the EMA's scalars), while the trained tensors, AdamW's states and the EMA's shadow are a
``torch.distributed.checkpoint`` (DCP) directory ``state/shards/`` that every process writes its shards into.
DCP saves each tensor with its global shape, so the shards load into any number of processes (>= 2; the
optimizer states are keyed by parameter name through ``get_state_dict``). ``meta.json`` records the strategy,
the process count and the sha256 of every shard file, checked (spread over the processes) before loading.

DCP pickles its ``.metadata`` and the state's non-tensor values (AdamW's hyperparameters, the EMA's scalars) and
its own reader unpickles them with every class allowed. Since whoever can write ``state/`` can write the shards
and their digests both, ``read_shards`` reads them as plain data instead: ``.metadata`` with only the classes
it is made of (``METADATA_GLOBALS``), the values with ``torch.load(weights_only=True)``; and reads no file
that ``.metadata`` names outside the verified shards. Anything else is a ``DamagedFileError`` naming the file.

A state saved under one strategy cannot be loaded under the other (a ``none`` state is one file of whole
tensors, an ``fsdp`` one DCP shards): ``check_strategy`` refuses it before the model loads, naming both.

The final ``checkpoint/`` stays a normal HF directory: the full state is gathered onto the main process's
CPU, loaded into a plain copy of the model read from ``model.path`` (LoRA applied again, then merged) and
saved by ``checkpoint.save_checkpoint``.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import pickle
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from accelerate import Accelerator
from accelerate.utils import gather_object
from torch import nn
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import ReadItem
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from sparsectx.checkpoints import DamagedFileError, discarded_on_error, fresh_tmp, not_plain, tmp_dir
from sparsectx.hashing import files_sha256
from sparsectx.models import ModelConfig, load_model
from sparsectx.training.checkpoint import META_FILE
from sparsectx.training.ema import ParameterEMA
from sparsectx.training.lora import apply_lora
from sparsectx.training.method import MethodConfig
from sparsectx.training.student import Student
from sparsectx.training.update import Trainer

log = logging.getLogger(__name__)

SHARDS = "shards"
"""The DCP directory inside ``state/``."""
METADATA = ".metadata"
"""DCP's index of the shards (a pickle) inside ``SHARDS``."""
METADATA_GLOBALS = frozenset(
    {
        "torch.distributed.checkpoint.metadata.Metadata",
        "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
        "torch.distributed.checkpoint.metadata.TensorProperties",
        "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
        "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
        "torch.distributed.checkpoint.metadata.MetadataIndex",
        "torch.distributed.checkpoint.metadata.StorageMeta",
        "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
        "torch.distributed.checkpoint.filesystem._StorageInfo",
        "torch.Size",
        "torch.serialization._get_layout",
        "pathlib.PosixPath",
    }
)
"""Every class and function DCP's ``.metadata`` is made of (``module.name``): its dataclasses, shapes, tensor
layouts and memory formats, and the checkpoint's path; torch's dtypes are allowed besides. Nothing else is built
or called when it is read."""
TRAINED = StateDictOptions(ignore_frozen_params=True)
"""Only the trained tensors (and their AdamW states) go into the shards; frozen weights come from the model."""
LOAD = StateDictOptions(ignore_frozen_params=True, strict=False)
"""Loading them leaves the frozen weights alone; a trained tensor missing from the shards fails in ``dcp.load``,
whose template is exactly the model's trained tensors."""


def check_strategy(meta: dict[str, Any], strategy: str, processes: int, state_dir: Path) -> None:
    """Returns None if ``state_dir`` (its ``meta.json``) can be resumed under ``strategy`` on ``processes``.

    Raises:
        ValueError: the state was saved under the other strategy, or holds rollouts that the next steps reuse
            (``method.rl.num_iterations`` > 1: one set per process) and ``processes`` differs; naming the
            saved strategy and process count and the setting that resumes it.
    """
    saved, count = meta.get("sharding", "none"), meta["processes"]
    if meta.get("rollouts_kept") and count != processes:
        raise ValueError(
            f"{state_dir} holds the rollouts of {count} processes, reused by the next step "
            f"(method.rl.num_iterations); this run has {processes}: resume with {count} processes"
        )
    if saved != strategy:
        where = "on any number of processes" if saved == "none" else "on any number of processes (its shards reshard)"
        raise ValueError(
            f"{state_dir} was saved with distributed.strategy={saved} by {count} processes; this run has "
            f"distributed.strategy={strategy} with {processes}: a {saved} state cannot be converted. Resume "
            f"with distributed.strategy={saved} ({where}), or start over in a new runs_root"
        )
    if saved == "fsdp" and count != processes:
        log.info("resharding %s from %d to %d processes", state_dir, count, processes)


def shard_tensors(student: Student, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Returns the DCP state dict: trained tensors and AdamW states by parameter name, and the EMA's tensors."""
    model, optim = get_state_dict(student.model, optimizer, options=TRAINED)
    tensors: dict[str, Any] = {"model": model, "optim": optim}
    if student.ema is not None:
        tensors["ema"] = student.ema.state_dict()
    return tensors


def ema_scalars(state: dict[str, Any]) -> dict[str, Any]:
    """Returns an EMA ``state_dict`` without its tensors (for ``trainer.pt``; the tensors are in the shards)."""
    return {key: ema_scalars(value) if key == "copy" else value for key, value in state.items() if key != "shadow"}


def save_shards(trainer: Trainer, state_dir: Path) -> tuple[Path, dict[str, str]]:
    """Returns (the fresh temporary ``state/`` directory, {shard file: sha256}) after every process wrote its
    shards into it; the caller adds ``trainer.pt`` and ``meta.json`` and swaps it in (main process)."""
    accelerator: Accelerator = trainer.accelerator
    tmp = fresh_tmp(state_dir) if accelerator.is_main_process else tmp_dir(state_dir)
    accelerator.wait_for_everyone()
    with discarded_on_error(tmp):
        dcp.save(shard_tensors(trainer.student, trainer.optimizer), checkpoint_id=tmp / SHARDS)
        accelerator.wait_for_everyone()
        return tmp, shard_digests(accelerator, tmp / SHARDS)


def shard_digests(accelerator: Accelerator, shards: Path) -> dict[str, str]:
    """Returns {file name: sha256} of every file in ``shards``, each file hashed by one process."""
    files = sorted(p for p in shards.iterdir() if p.is_file())
    rank, world = accelerator.process_index, accelerator.num_processes
    mine = files_sha256(files[rank::world])
    merged: dict[str, str] = {}
    for part in gather_object([mine]):
        merged.update(part)
    return dict(sorted(merged.items()))


def verify_shards(accelerator: Accelerator, state_dir: Path, meta: dict[str, Any]) -> None:
    """Returns None if the shard files are exactly those ``meta.json`` records, with their sha256.

    Raises:
        DamagedFileError: on every process, naming the first differing file and the fix.
    """
    want = meta["shards_sha256"]
    shards = state_dir / SHARDS
    got = shard_digests(accelerator, shards) if shards.is_dir() else {}
    for name in sorted(set(want) | set(got)):
        if want.get(name) != got.get(name):
            if name not in got:
                state = "is missing"
            elif name not in want:
                state = "is not listed in meta.json"
            else:
                state = "differs from its sha256 in meta.json"
            raise DamagedFileError(f"{shards / name} {state}; {_restart_fix(state_dir)}")


def _restart_fix(state_dir: Path) -> str:
    return (
        f"the resume state is damaged and is not used. Restore {state_dir} from a backup, or delete it to start "
        "this run over from step 0"
    )


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP's ``.metadata`` allowing only ``METADATA_GLOBALS`` and torch's dtypes (``pickle.load`` would
    call whatever function the file names)."""

    def find_class(self, module: str, name: str) -> Any:
        """Returns the allowed class or function ``module.name``; raises ``UnpicklingError`` for any other."""
        dtype = module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        if f"{module}.{name}" not in METADATA_GLOBALS and not dtype:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which DCP's metadata is not made of")
        return super().find_class(module, name)


def read_metadata(state_dir: Path, verified: Collection[str]) -> Metadata:
    """Returns the shards' ``.metadata``, read as plain data, after checking that every file it names is one of
    the ``verified`` shard files (``verify_shards``), so no other file is read.

    Raises:
        DamagedFileError: naming the file and the fix when it names a class or function that DCP's metadata is not
            made of (it may be hostile, or written by another torch version), cannot be read, or names a file
            outside ``verified``.
    """
    path = state_dir / SHARDS / METADATA
    try:
        with open(path, "rb") as handle:
            metadata = _MetadataUnpickler(handle).load()
    # a malformed pickle raises any of these; the allowed constructors raise the last three on bad arguments
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, KeyError) as err:
        raise DamagedFileError(
            f"{path} is not DCP metadata ({err}): it may be hostile (anyone who can write {state_dir} can write it "
            f"and its digest), damaged or written by another torch version. Nothing in it was run; "
            f"{_restart_fix(state_dir)}"
        ) from err
    if not isinstance(metadata, Metadata):
        raise DamagedFileError(f"{path} holds {type(metadata).__name__}, not DCP metadata; {_restart_fix(state_dir)}")
    for info in metadata.storage_data.values():
        if info.relative_path not in verified:
            raise DamagedFileError(
                f"{path} names {info.relative_path}, which is not one of the shard files verified against "
                f"{state_dir / META_FILE}; {_restart_fix(state_dir)}"
            )
    return metadata


class _VerifiedReader(FileSystemReader):
    """DCP's file reader, over shards whose ``.metadata`` ``read_metadata`` read and checked beforehand."""

    def __init__(self, shards: Path, metadata: Metadata) -> None:
        super().__init__(shards)
        self.verified = metadata

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """Returns the checked metadata (DCP's own reader would unpickle ``.metadata`` with every class allowed)."""
        return self.verified


class _PlainLoadPlanner(DefaultLoadPlanner):
    """DCP's default load planner, reading the shards' non-tensor values with ``torch.load(weights_only=True)``
    (DCP's own unpickles it whole); its tensors DCP already reads so."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__()
        self.state_dir = state_dir

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        """Returns None after setting the value ``read_item`` names in the state dict being loaded.

        Raises:
            DamagedFileError: the value is not plain data, naming its shard file, its key and the fix.
        """
        key = read_item.dest_index.fqn
        try:
            loaded = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as err:
            shard = self.state_dir / SHARDS / self.metadata.storage_data[read_item.storage_index].relative_path
            # from None: torch's own message advises the unrestricted load, the very one refused here
            raise DamagedFileError(
                f"{shard}: the value of {key} is not plain data ({not_plain(value, err)}): it may be hostile "
                f"(anyone who can write {self.state_dir} can write it and its digest). Nothing in it was run; "
                f"{_restart_fix(self.state_dir)}"
            ) from None
        *parents, last = self.mappings[key]  # the value's path in the nested state dict (DCP flattens it)
        target = self.original_state_dict
        for part in parents:
            target = target[part]
        target[last] = loaded


def read_shards(accelerator: Accelerator, state_dir: Path, meta: dict[str, Any], tensors: dict[str, Any]) -> None:
    """Returns None after loading ``state_dir``'s shards into ``tensors`` (a DCP state dict whose tensors are
    filled in place and whose other values are replaced), verified and read as plain data (module docstring).

    Raises:
        DamagedFileError: on every process, naming the first file that differs from ``meta.json``, holds more
            than plain data or names a file outside the shards, and the fix.
    """
    verify_shards(accelerator, state_dir, meta)
    metadata = read_metadata(state_dir, meta["shards_sha256"])
    try:
        dcp.load(
            tensors, storage_reader=_VerifiedReader(state_dir / SHARDS, metadata), planner=_PlainLoadPlanner(state_dir)
        )
    except CheckpointException as err:  # DCP gathers each process's failure into this one
        refused = [failure for failure, _ in err.failures.values() if isinstance(failure, DamagedFileError)]
        if refused:
            raise refused[0] from err
        raise


def load_shards(trainer: Trainer, state_dir: Path, meta: dict[str, Any], payload: dict[str, Any]) -> None:
    """Returns None after loading the trained tensors, AdamW states and EMA from ``state_dir``'s shards into
    the sharded student and optimizer (any number of processes); ``payload`` is ``trainer.pt``."""
    student = trainer.student
    model, optim = get_state_dict(student.model, trainer.optimizer, options=TRAINED)
    tensors: dict[str, Any] = {"model": model, "optim": optim}
    if student.ema is not None:
        tensors["ema"] = ema_template(student, payload["ema"])
    read_shards(trainer.accelerator, state_dir, meta, tensors)
    set_state_dict(student.model, trainer.optimizer, model_state_dict=model, optim_state_dict=optim, options=LOAD)
    if student.ema is not None:
        student.ema.load_state_dict(tensors["ema"])


def ema_template(student: Student, scalars: dict[str, Any]) -> dict[str, Any]:
    """Returns the EMA state dict DCP loads into: the saved scalars over the fresh EMA's state, with sharded
    tensors shaped like the trained ones where the saved EMA had an average (none before its first update)."""
    state = overlay(student.ema.state_dict(), scalars)
    if isinstance(student.ema, ParameterEMA) and int(scalars["num_updates"]) > 0:
        state["shadow"] = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in student.trainable.items()}
    return state


def overlay(base: dict[str, Any], scalars: dict[str, Any]) -> dict[str, Any]:
    """Returns ``base`` with the values of ``scalars`` written over it, nested dicts merged key by key."""
    out = dict(base)
    for key, value in scalars.items():
        out[key] = overlay(base[key], value) if isinstance(value, dict) else value
    return out


def export_sharded(student: Student, model_cfg: ModelConfig, method: MethodConfig, main: bool) -> nn.Module | None:
    """Returns, on the main process, a plain CPU model holding the student's gathered weights (LoRA merged, in
    the checkpoint dtype), ready for ``save_checkpoint``; None on the others (which take part in the gather).
    """
    full = get_model_state_dict(student.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not main:
        return None
    plain = load_model(dataclasses.replace(model_cfg, device="cpu")).adapter.model
    plain.requires_grad_(False)  # as build_student: peft then marks the adapters trainable
    peft = apply_lora(plain, method.lora) if method.lora.enabled else None
    plain.load_state_dict(full, strict=True)
    model = plain if peft is None else peft.merge_and_unload()
    return model.to(student.dtype)
