"""The run directory's two outputs, both written atomically (a directory exists only when it is complete).

- ``state/``: everything a resume needs (style convention 18): trainable weights, optimizer, LR scheduler,
  EMA, every RNG state (python, numpy, torch, cuda; one set per process), optimizer steps done, samples
  consumed, the W&B run id and the hash of the run-defining config; ``meta.json`` beside it is readable
  before the model loads, so a mismatched resume fails first. Under ``distributed.strategy=fsdp`` the
  weights, optimizer and EMA tensors are shards in ``state/shards/`` instead (``training.sharded_state``).
- ``checkpoint/``: the final model as a HF directory plus processor files and a model card, loadable with
  ``model.path=<dir>`` (LoRA merged into the base weights, or the full weights). A LoRA run's adapter, in PEFT's
  layout, is the same kind of directory (``training.lora_export``).

The formats both share with evaluation, pretraining and export (the model directory and its record, plain-data
payloads, the atomic directory swap, ``DamagedFileError``) are ``sparsectx.checkpoints``'s; this module holds
what only the trainer writes and reads. Each directory is valid only as a whole: ``meta.json`` records the
sha256 and size of ``trainer.pt``, and ``sparsectx_training.json`` the sha256 of every other file of the
checkpoint, checked before either is trusted. A state with a payload but no readable metadata, or one whose
parts disagree, raises ``DamagedFileError`` naming the file and the fix; it is never restarted over or loaded.
``trainer.pt`` holds plain data only and is read with ``checkpoints.load_plain``; ``state/shards/`` is read as
plain data too (``training.sharded_state.read_shards``).

What is verified when (no file is hashed twice for one use):
- save: ``trainer.pt``'s sha256 is computed from its bytes as ``torch.save`` writes them (never read back);
  a checkpoint's files are hashed once after ``save_pretrained`` wrote them, in parallel.
- resume, before the model loads (``read_meta``): ``meta.json`` readable, ``trainer.pt`` present, its size
  the recorded one (a truncated or foreign payload fails here, in milliseconds).
- resume, loading (``load_state``): ``trainer.pt``'s full sha256, hashed on a thread while ``load_plain``
  reads the file; a mismatch raises before the payload is returned, so nothing of it is used.
- rerun and evaluation (``checkpoints.verify_checkpoint``): every checkpoint file's full sha256, in parallel; a
  file missing, changed or added is damage, and a training rerun rewrites the whole directory from ``state/``.
"""

from __future__ import annotations

import logging
import random
import sys
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from sparsectx.checkpoints import (
    DamagedFileError,
    discarded_on_error,
    fresh_tmp,
    load_plain,
    replace_dir,
    save_model_dir,
    torch_save,
)
from sparsectx.dotted import flatten
from sparsectx.hashing import file_sha256
from sparsectx.io import atomic_write_json, read_json_object
from sparsectx.models.processor import ImageTextProcessor

log = logging.getLogger(__name__)

STATE_FILE = "trainer.pt"
META_FILE = "meta.json"


def rng_state() -> dict[str, Any]:
    """Returns this process's python, numpy, torch and (when present) CUDA RNG states as plain data (tuples of
    ints, tensors, numbers), which ``load_plain`` reads back: numpy's Mersenne Twister key is a tensor."""
    numpy = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        "numpy": {
            "key": torch.from_numpy(numpy["state"]["key"].astype(np.int64)),
            "pos": int(numpy["state"]["pos"]),
            "has_gauss": int(numpy["has_gauss"]),
            "gauss": float(numpy["gauss"]),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Returns None after restoring an ``rng_state`` dict."""
    random.setstate(state["python"])
    saved = state["numpy"]
    mt19937 = {"key": saved["key"].cpu().numpy().astype(np.uint32), "pos": saved["pos"]}
    np.random.set_state(
        {"bit_generator": "MT19937", "state": mt19937, "has_gauss": saved["has_gauss"], "gauss": saved["gauss"]}
    )
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])  # load_state mapped them to the device


def canonical(obj: Any) -> Any:
    """Returns ``obj`` with its dicts, lists and tuples rebuilt and every string interned (tensors, arrays and
    other objects are kept as they are), so that ``torch.save`` writes the same bytes for equal payloads.

    Pickle memoizes by object identity: a resumed run's optimizer keys are strings loaded from ``trainer.pt``,
    an uninterrupted run's are the code's interned literals, and a key shared with the payload's own
    ``"step"`` was written once as a back-reference in one run and twice in the other. The values were equal;
    only the bytes (and torch's content-derived serialization id) differed.
    """
    if type(obj) is str:
        return sys.intern(obj)
    if type(obj) in (dict, OrderedDict):
        return type(obj)((canonical(key), canonical(value)) for key, value in obj.items())
    if type(obj) in (list, tuple):
        return type(obj)(canonical(item) for item in obj)
    return obj


def save_state(state_dir: Path, payload: dict[str, Any], meta: dict[str, Any], tmp: Path | None = None) -> None:
    """Returns None after atomically writing ``state/`` (``trainer.pt`` + ``meta.json`` with its sha256, size).

    Args:
        state_dir: ``<run_dir>/state``.
        payload: tensors and objects for ``torch.save`` (weights, optimizer, scheduler, EMA, RNG, counters).
        meta: JSON-able summary: step, samples_seen, config_hash, defining keys, resolved config, W&B id.
        tmp: the temporary directory (``tmp_dir``) already holding the sharded run's shards, or None for a
            fresh one.
    """
    tmp = fresh_tmp(state_dir) if tmp is None else tmp
    with discarded_on_error(tmp):
        written = torch_save(tmp / STATE_FILE, canonical(payload), f"{state_dir} keeps the last state")
        atomic_write_json(tmp / META_FILE, {**meta, "payload_sha256": written.sha256, "payload_bytes": written.size})
    replace_dir(tmp, state_dir)


def _restart_fix(state_dir: Path) -> str:
    return (
        f"the resume state is damaged and is not used. Restore {state_dir} from a backup, or delete it "
        "(`rm -r` it) to start this run over from step 0"
    )


def read_meta(state_dir: Path) -> dict[str, Any] | None:
    """Returns the ``meta.json`` of a resume state, or None without a state (call ``recover_dir`` first).

    Raises ``DamagedFileError`` naming the file and the fix when ``state/`` exists but its ``meta.json`` is
    missing or unreadable, its ``trainer.pt`` is missing, or the payload's size differs from the recorded one.
    The payload's sha256 is checked by ``load_state``, which reads the file anyway.
    """
    if not state_dir.exists():
        return None
    meta_path, payload = state_dir / META_FILE, state_dir / STATE_FILE
    if not meta_path.is_file():
        found = f"{payload} exists but" if payload.is_file() else "it exists but"
        raise DamagedFileError(f"{state_dir}: {found} {meta_path} is missing; {_restart_fix(state_dir)}")
    meta = read_json_object(meta_path, _restart_fix(state_dir), DamagedFileError)
    if not payload.is_file():
        raise DamagedFileError(f"{payload} is missing beside {meta_path}; {_restart_fix(state_dir)}")
    want = meta.get("payload_bytes")
    if want is not None and (got := payload.stat().st_size) != want:
        raise DamagedFileError(
            f"{payload} does not match {meta_path} ({got} bytes, recorded {want}: truncated, damaged or from "
            f"another save); {_restart_fix(state_dir)}"
        )
    return meta


def _check_payload_digest(path: Path, meta: dict[str, Any], digest: str) -> None:
    """Raises ``DamagedFileError`` when ``digest`` (the payload's sha256) is not the one ``meta`` records."""
    want = meta.get("payload_sha256")
    if want is None:
        log.warning("%s records no payload sha256 (written before digests); %s is not verified", META_FILE, path)
    elif digest != want:
        raise DamagedFileError(
            f"{path} does not match {path.parent / META_FILE} (sha256 {digest[:12]}... recorded {want[:12]}...: "
            f"truncated, damaged or from another save); {_restart_fix(path.parent)}"
        )


def load_state(state_dir: Path, device: torch.device, meta: dict[str, Any]) -> dict[str, Any]:
    """Returns the ``trainer.pt`` payload with tensors on ``device``, read as plain data (``load_plain``).

    The file's sha256 is computed on a thread while ``load_plain`` reads it. Raises ``DamagedFileError``
    naming the file before returning anything when the digest, or the payload's step and samples seen,
    differ from ``meta`` (the ``read_meta`` result), or the file cannot be read or holds more than plain data.
    """
    path = state_dir / STATE_FILE
    # "cpu:0" (a multi-process CPU run's device) is no location torch.load can restore to; "cpu" is
    location = torch.device("cpu") if device.type == "cpu" else device
    with ThreadPoolExecutor(1, thread_name_prefix="sha256") as pool:
        digest = pool.submit(file_sha256, path)
        try:
            payload = load_plain(path, location, _restart_fix(state_dir))
        except DamagedFileError:
            _check_payload_digest(path, meta, digest.result())  # a damaged file is named as damaged
            raise
        _check_payload_digest(path, meta, digest.result())
    if not isinstance(payload, dict):
        raise DamagedFileError(f"{path} holds {type(payload).__name__}, not a dict; {_restart_fix(state_dir)}")
    for key in ("step", "samples_seen"):
        if payload.get(key) != meta.get(key):
            raise DamagedFileError(
                f"{path} does not match {state_dir / META_FILE}: {key} {payload.get(key)!r} vs "
                f"{meta.get(key)!r}; {_restart_fix(state_dir)}"
            )
    return payload


def check_resume(meta: dict[str, Any], defining: dict[str, Any], resolved: dict[str, Any], where: Path) -> list[str]:
    """Returns warnings for changed bookkeeping keys; raises ValueError naming every changed run-defining key.

    Args:
        meta: the stored ``meta.json``.
        defining: the current run-defining keys (flattened).
        resolved: the current resolved config.
        where: the run directory (for the message).
    """
    old = meta["defining"]
    changed = sorted(k for k in set(old) | set(defining) if old.get(k, "<absent>") != defining.get(k, "<absent>"))
    if changed:
        lines = "; ".join(f"{k}: {old.get(k, '<absent>')!r} -> {defining.get(k, '<absent>')!r}" for k in changed)
        raise ValueError(
            f"cannot resume {where}: run-defining keys changed ({lines}). Resume with the original values, "
            "or "
            f"start a separate run (runs_root=<new dir>) or delete {where / 'state'} to start over."
        )
    before, now = flatten(meta["resolved"]), flatten(resolved)
    return [
        f"{k} changed since the state was written: {before.get(k)!r} -> {now.get(k)!r} (bookkeeping only, resuming)"
        for k in sorted(set(before) | set(now))
        if k not in defining and before.get(k) != now.get(k)
    ]


def save_checkpoint(
    checkpoint_dir: Path,
    model: nn.Module,
    processor: ImageTextProcessor,
    info: dict[str, Any],
    card: str | None = None,
) -> None:
    """Returns None after atomically writing the final HF model directory with the processor files.

    Args:
        checkpoint_dir: ``<run_dir>/checkpoint``.
        model: the model to export (LoRA already merged).
        processor: the processor whose tokenizer and image-processor files go beside the weights.
        info: provenance written as ``sparsectx_training.json`` (config hash, steps, git commit); the sha256
            of every other file of the directory is added as ``files_sha256`` ({relative path: hex digest}).
        card: the model card written as ``README.md`` (``training.model_card``); None writes none.
    """

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        processor.tokenizer.save_pretrained(tmp)
        processor.image_processor.save_pretrained(tmp)
        if card is not None:
            (tmp / "README.md").write_text(card, encoding="utf-8")

    save_model_dir(checkpoint_dir, write, info)
