"""The run directory's two outputs, both written atomically (a directory exists only when it is complete).

- ``state/``: everything a resume needs (style convention 18): trainable weights, optimizer, LR scheduler,
  EMA, every RNG state (python, numpy, torch, cuda; one set per process), optimizer steps done, samples
  consumed, the W&B run id and the hash of the run-defining config; ``meta.json`` beside it is readable
  before the model loads, so a mismatched resume fails first.
- ``checkpoint/``: the final model as a HF directory plus processor files, loadable with ``model.path=<dir>``
  (LoRA merged into the base weights, or the full weights).

Directories are written as ``.<name>.tmp`` and swapped in with two renames; if a crash lands between them, the
previous complete directory is left as ``.<name>.old`` and ``recover_dir`` renames it back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from sparsectx.io import atomic_write_json
from sparsectx.models.processor import ImageTextProcessor
from sparsectx.training.config import flatten

log = logging.getLogger(__name__)

STATE_FILE = "trainer.pt"
META_FILE = "meta.json"
CHECKPOINT_INFO = "sparsectx_training.json"


def config_hash(defining: dict[str, Any]) -> str:
    """Returns the sha256 of the run-defining keys (sorted JSON)."""
    return hashlib.sha256(json.dumps(defining, sort_keys=True, default=str).encode()).hexdigest()


def _sibling(final: Path, suffix: str) -> Path:
    return final.with_name(f".{final.name}.{suffix}")


def recover_dir(final: Path) -> None:
    """Returns None; if a swap was interrupted after moving ``final`` aside, moves the old copy back."""
    old = _sibling(final, "old")
    if not final.exists() and old.exists():
        os.replace(old, final)
        log.warning("recovered %s from an interrupted write", final)


def fresh_tmp(final: Path) -> Path:
    """Returns an empty temporary directory beside ``final`` (any leftover from a crash is removed)."""
    tmp = _sibling(final, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def replace_dir(tmp: Path, final: Path) -> None:
    """Returns None after atomically putting the complete directory ``tmp`` at ``final``."""
    old = _sibling(final, "old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def rng_state() -> dict[str, Any]:
    """Returns this process's python, numpy, torch and (when present) CUDA RNG states."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Returns None after restoring an ``rng_state`` dict."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])  # load_state mapped them to the device


def save_state(state_dir: Path, payload: dict[str, Any], meta: dict[str, Any]) -> None:
    """Returns None after atomically writing ``state/`` (``trainer.pt`` + ``meta.json``).

    Args:
        state_dir: ``<run_dir>/state``.
        payload: tensors and objects for ``torch.save`` (weights, optimizer, scheduler, EMA, RNG, counters).
        meta: JSON-able summary: step, samples_seen, config_hash, defining keys, resolved config, W&B id.
    """
    tmp = fresh_tmp(state_dir)
    torch.save(payload, tmp / STATE_FILE)
    atomic_write_json(tmp / META_FILE, meta)
    replace_dir(tmp, state_dir)


def read_meta(state_dir: Path) -> dict[str, Any] | None:
    """Returns the ``meta.json`` of a resume state, or None without one (call ``recover_dir`` first)."""
    path = state_dir / META_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def load_state(state_dir: Path, device: torch.device) -> dict[str, Any]:
    """Returns the ``trainer.pt`` payload with tensors on ``device`` (our own file, so full unpickling)."""
    return torch.load(state_dir / STATE_FILE, map_location=device, weights_only=False)


def check_resume(
    meta: dict[str, Any], defining: dict[str, Any], resolved: dict[str, Any], where: Path
) -> list[str]:
    """Returns warnings for changed bookkeeping keys; raises ValueError naming every changed run-defining key.

    Args:
        meta: the stored ``meta.json``.
        defining: the current run-defining keys (flattened).
        resolved: the current resolved config.
        where: the run directory (for the message).
    """
    old = meta["defining"]
    changed = sorted(
        k for k in set(old) | set(defining) if old.get(k, "<absent>") != defining.get(k, "<absent>")
    )
    if changed:
        lines = "; ".join(
            f"{k}: {old.get(k, '<absent>')!r} -> {defining.get(k, '<absent>')!r}" for k in changed
        )
        raise ValueError(
            f"cannot resume {where}: run-defining keys changed ({lines}). Resume with the original values, "
            "or "
            f"start a separate run (runs_root=<new dir>) or delete {where / 'state'} to start over."
        )
    before, now = flatten(meta["resolved"]), flatten(resolved)
    return [
        f"{k} changed since the state was written: {before.get(k)!r} -> {now.get(k)!r} "
        "(bookkeeping only, resuming)"
        for k in sorted(set(before) | set(now))
        if k not in defining and before.get(k) != now.get(k)
    ]


def save_checkpoint(
    checkpoint_dir: Path, model: nn.Module, processor: ImageTextProcessor, info: dict[str, Any]
) -> None:
    """Returns None after atomically writing the final HF model directory with the processor files.

    Args:
        checkpoint_dir: ``<run_dir>/checkpoint``.
        model: the model to export (LoRA already merged).
        processor: the processor whose tokenizer and image-processor files go beside the weights.
        info: provenance written as ``sparsectx_training.json`` (config hash, steps, git commit).
    """
    tmp = fresh_tmp(checkpoint_dir)
    model.save_pretrained(tmp)
    processor.tokenizer.save_pretrained(tmp)
    processor.image_processor.save_pretrained(tmp)
    atomic_write_json(tmp / CHECKPOINT_INFO, info)
    replace_dir(tmp, checkpoint_dir)


def checkpoint_info(checkpoint_dir: Path) -> dict[str, Any] | None:
    """Returns the checkpoint's config hash, steps and samples seen, or None when there is no checkpoint."""
    path = checkpoint_dir / CHECKPOINT_INFO
    if not path.is_file():
        return None
    info = json.loads(path.read_text())
    return {key: info.get(key) for key in ("config_hash", "steps", "samples_seen")}
