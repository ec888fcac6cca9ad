"""Prints the cost of the resume state's and checkpoint's sha256 digests, before and after hashing while writing.

    python scripts/bench_state_digest.py [--gb 1.0] [--repeats 3] [--dir /tmp]

"before" replays the earlier code path (``torch.save`` to a path, then ``file_sha256`` reading the file back;
a resume hashing the file, then ``torch.load``; an evaluation hashing weight shards one after another);
"after" calls the library as it is (``save_state``; ``read_meta`` + ``load_state``; ``verify_checkpoint``).
Figures are medians of ``--repeats`` runs in seconds, on a dummy payload of ``--gb`` GB of float32 tensors
(the page cache holds the files, as it does right after a save).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from sparsectx.checkpoints import fresh_tmp, replace_dir, verify_checkpoint, weight_files
from sparsectx.hashing import file_sha256, files_sha256
from sparsectx.paths import CHECKPOINT_INFO
from sparsectx.training import checkpoint as ckpt


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    """Returns the median wall time of ``repeats`` calls of ``run``."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def dummy_payload(gb: float) -> dict:
    """Returns a resume-state-like payload: weights and two optimizer moments, ``gb`` GB of float32 in all."""
    n = int(gb * 1e9 / 4 / 3 / 8)
    weights = {f"layer{i}": torch.randn(n) for i in range(8)}
    moments = {f"layer{i}": {"exp_avg": torch.randn(n), "exp_avg_sq": torch.rand(n)} for i in range(8)}
    return {"step": 1, "samples_seen": 8, "trainable": weights, "optimizer": moments}


def old_save(state: Path, payload: dict) -> None:
    """The save before this change: torch.save to the path, then the file read back for its sha256."""
    tmp = fresh_tmp(state)
    torch.save(payload, tmp / ckpt.STATE_FILE)
    meta = {"step": 1, "samples_seen": 8, "payload_sha256": file_sha256(tmp / ckpt.STATE_FILE)}
    (tmp / ckpt.META_FILE).write_text(json.dumps(meta))
    replace_dir(tmp, state)


def old_resume(state: Path) -> dict:
    """The resume before this change: the whole file hashed, then loaded."""
    meta = json.loads((state / ckpt.META_FILE).read_text())
    assert file_sha256(state / ckpt.STATE_FILE) == meta["payload_sha256"]
    return torch.load(state / ckpt.STATE_FILE, weights_only=True)


def new_resume(state: Path) -> dict:
    """The resume now: size checked, then the digest computed while torch.load reads the file."""
    return ckpt.load_state(state, torch.device("cpu"), ckpt.read_meta(state))


def fake_checkpoint(root: Path, payload: dict, shards: int) -> Path:
    """Returns a directory of ``shards`` weight files with recorded digests (what ``save_checkpoint`` writes)."""
    target = root / "checkpoint"
    target.mkdir()
    tensors = list(payload["trainable"].values())
    for i in range(shards):
        torch.save(tensors[i::shards], target / f"model-{i:05d}.pt")
    digests = files_sha256(weight_files(target))
    (target / CHECKPOINT_INFO).write_text(json.dumps({"weights_sha256": digests}))
    return target


def main() -> None:
    """Prints before/after seconds for a state save, a resume and a checkpoint verification."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    payload = dummy_payload(args.gb)
    root = Path(tempfile.mkdtemp(prefix="bench_digest_", dir=args.dir))
    try:
        old, new = root / "old" / "state", root / "new" / "state"
        shards = fake_checkpoint(root, payload, shards=4)
        files = weight_files(shards)
        rows = [
            (
                "save state",
                median_seconds(lambda: old_save(old, payload), args.repeats),
                median_seconds(lambda: ckpt.save_state(new, payload, {"step": 1, "samples_seen": 8}), args.repeats),
            ),
            (
                "resume (verify + load)",
                median_seconds(lambda: old_resume(old), args.repeats),
                median_seconds(lambda: new_resume(new), args.repeats),
            ),
            (
                "verify 4-shard checkpoint",
                median_seconds(lambda: {p.name: file_sha256(p) for p in files}, args.repeats),
                median_seconds(lambda: verify_checkpoint(shards), args.repeats),
            ),
        ]
        size = (new / ckpt.STATE_FILE).stat().st_size
        hashed = median_seconds(lambda: file_sha256(new / ckpt.STATE_FILE), args.repeats)
        print(f"trainer.pt {size / 1e9:.2f} GB; sha256 of it alone (page cache) {hashed:.2f} s")
        print(f"{'operation':28s} {'before s':>9s} {'after s':>9s}")
        for name, before, after in rows:
            print(f"{name:28s} {before:9.2f} {after:9.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
