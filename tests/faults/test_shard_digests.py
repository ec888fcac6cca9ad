"""A sharded resume state (``distributed.strategy=fsdp``) is verified shard by shard before it is loaded: a
damaged, missing or extra shard file is a ``DamagedFileError`` naming the file and the fix."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed.checkpoint as dcp

from sparsectx.checkpoints import DamagedFileError
from sparsectx.training.sharded_state import SHARDS, shard_digests, verify_shards

pytestmark = pytest.mark.faults

ONE = SimpleNamespace(process_index=0, num_processes=1)
"""The accelerator fields the digests read: one process hashes every file."""


def saved_state(root: Path) -> dict:
    """Returns the ``meta.json`` entries of a state whose shards DCP wrote into ``root/shards``."""
    dcp.save({"w": torch.arange(4096, dtype=torch.float32)}, checkpoint_id=root / SHARDS, no_dist=True)
    return {"shards_sha256": shard_digests(ONE, root / SHARDS)}


def test_intact_shards_pass(tmp_path: Path) -> None:
    meta = saved_state(tmp_path)
    assert ".metadata" in meta["shards_sha256"] and len(meta["shards_sha256"]) >= 2
    verify_shards(ONE, tmp_path, meta)


def test_a_damaged_shard_is_named(tmp_path: Path) -> None:
    meta = saved_state(tmp_path)
    shard = next(p for p in (tmp_path / SHARDS).iterdir() if p.suffix == ".distcp")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(DamagedFileError, match=rf"{shard.name} differs from its sha256.*delete it"):
        verify_shards(ONE, tmp_path, meta)


def test_a_missing_or_extra_shard_is_named(tmp_path: Path) -> None:
    meta = saved_state(tmp_path)
    (tmp_path / SHARDS / ".metadata").unlink()
    with pytest.raises(DamagedFileError, match=r"\.metadata is missing"):
        verify_shards(ONE, tmp_path, meta)
    meta = saved_state(tmp_path / "again")
    (tmp_path / "again" / SHARDS / "__9_0.distcp").write_bytes(b"foreign")
    with pytest.raises(DamagedFileError, match=r"__9_0\.distcp is not listed in meta\.json"):
        verify_shards(ONE, tmp_path / "again", meta)
