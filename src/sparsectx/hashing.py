"""The sha256 digests the project records: of a file's bytes, of a folder's files, and of a config.

Each digest is recorded somewhere a later run compares it (a checkpoint's ``sparsectx_training.json``, a resume
state's ``meta.json``, a result's ``provenance``, a predictions row, a data folder's name, a W&B run id), so the
way it is computed never changes: a changed digest makes every recorded one stale.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

READ_BLOCK = 1 << 24
"""Bytes read per step while hashing a file (16 MiB: the digest does not depend on it)."""


def file_sha256(path: Path) -> str:
    """Returns the hex sha256 of a file's bytes (read in ``READ_BLOCK`` blocks): a record keyed by it is
    recomputed, or a file checked against it is refused, when the file changes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(READ_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def parallel_sha256(paths: list[Path]) -> list[str]:
    """Returns the hex sha256 of each of ``paths``, in order, hashed on parallel threads (hashlib releases the
    GIL while it hashes 2 KiB or more: CPython's ``Modules/hashlib.h``, ``HASHLIB_GIL_MINSIZE``)."""
    if not paths:
        return []
    with ThreadPoolExecutor(min(len(paths), os.cpu_count() or 1)) as pool:
        return list(pool.map(file_sha256, paths))


def tree_sha256(root: Path, names: list[str]) -> dict[str, str]:
    """Returns {relative path: hex sha256} of the files ``names`` under ``root`` (a checkpoint's record)."""
    return dict(zip(names, parallel_sha256([root / name for name in names]), strict=True))


def files_sha256(paths: list[Path]) -> dict[str, str]:
    """Returns {file name: hex sha256} of ``paths``, files of one folder named by their base name (a sharded
    state's shards, a model's weight files)."""
    return dict(zip((p.name for p in paths), parallel_sha256(paths), strict=True))


def config_hash(config: Mapping[str, Any], digits: int = 64, compact: bool = False) -> str:
    """Returns the first ``digits`` hex digits of the sha256 of ``config`` written as key-sorted JSON (a value
    JSON cannot encode, such as a ``Path``, written as its ``str``); ``compact`` leaves out the spaces after
    ``,`` and ``:``.

    Each record keeps the form it was first written in, since its digests are compared with those on disk:
    a training run's ``config_hash`` (``meta.json``, ``sparsectx_training.json``) is the whole digest with
    spaces; an evaluation's (``provenance.config_hash``, every predictions row) is 16 digits, compact; the
    pipeline's data folder keeps 10 digits and a W&B run id ``tracking.RUN_ID_DIGITS``, both with spaces.
    """
    separators = (",", ":") if compact else (", ", ": ")
    text = json.dumps(config, sort_keys=True, separators=separators, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:digits]
