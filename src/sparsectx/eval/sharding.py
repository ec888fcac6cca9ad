"""Data-parallel greedy evaluation: which items a process generates, and the merge of every process's part.

A shard is a contiguous run of whole engine calls (``queue_size`` items each, the chunks a one-process run
hands the engine): every item is decoded beside the same items as in one process, so its tokens do not
depend on the split even where batched kernels round differently (bf16 on a GPU). Shard i of n writes
``<bench>.predictions.shard-<i>-of-<n>.jsonl`` (rows exactly as the one-process predictions file holds
them); the merge reads the n parts in item order and the runner scores them once, writing the same
``<bench>.json`` and ``<bench>.predictions.jsonl`` as one process. The run key, hence the config hash, holds
no shard setting, so the parts' rows carry the one-process hash and a part from another config is refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from sparsectx.eval.config import ShardConfig
from sparsectx.io import read_jsonl

ENV_KEYS = {
    "torchrun": ("RANK", "WORLD_SIZE"),
    "slurm": ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT"),
}
"""The environment variables ``shard.from_env`` reads (torchrun's and accelerate's ranks; a SLURM array)."""


@dataclass(frozen=True)
class Shard:
    """This process's place in a data-parallel evaluation (``resolve_shard``)."""

    index: int
    count: int
    merge: bool
    """Generate nothing; merge the ``count`` parts (an explicit ``shard.merge=true``)."""
    barrier: bool
    """Launched by torchrun: after the parts, every rank meets at a barrier and rank 0 merges."""

    @property
    def one_process(self) -> bool:
        """Returns whether this process generates and scores every item itself (count 1)."""
        return self.count == 1


def _env_int(environ: Mapping[str, str], name: str, source: str) -> int:
    value = environ.get(name)
    if value is None or not value.strip().lstrip("-").isdigit():
        launcher = "torchrun --nproc_per_node N" if source == "torchrun" else "sbatch --array=0-<N-1>"
        raise ValueError(
            f"shard.from_env={source}: environment variable {name}={value!r} is not an integer; launch with "
            f"`{launcher} ...`, or set shard.from_env=none with shard.count and shard.index"
        )
    return int(value)


def resolve_shard(cfg: ShardConfig, environ: Mapping[str, str]) -> Shard:
    """Returns this process's shard: ``shard.index``/``shard.count``, or the launcher's from ``environ``.

    Raises:
        ValueError: a variable ``from_env`` needs is missing or not an integer, or a SLURM array's task ids
            are not consecutive (the index would fall outside [0, count)).
    """
    if cfg.from_env == "none":
        return Shard(cfg.index, cfg.count, cfg.merge, barrier=False)
    values = [_env_int(environ, name, cfg.from_env) for name in ENV_KEYS[cfg.from_env]]
    if cfg.from_env == "torchrun":
        index, count = values
    else:
        task, first, count = values
        index = task - first
    if count < 1 or not 0 <= index < count:
        names = ", ".join(f"{n}={environ[n]}" for n in ENV_KEYS[cfg.from_env])
        raise ValueError(
            f"shard.from_env={cfg.from_env}: {names} give shard {index} of {count}, outside [0, {count}); "
            "a SLURM array's task ids must be consecutive (e.g. --array=0-7, no step)"
        )
    return Shard(index, count, merge=False, barrier=cfg.from_env == "torchrun" and count > 1)


def shard_span(n_items: int, queue_size: int, index: int, count: int, bench: str) -> range:
    """Returns the positions of the items shard ``index`` of ``count`` generates, in item order.

    The ``ceil(n_items / queue_size)`` engine calls are dealt out in contiguous runs whose lengths differ by
    at most one; shard i's run starts at call ``floor(i * calls / count)``.

    Raises:
        ValueError: more shards than engine calls (some shard would get no item); names the numbers and the fix.
    """
    calls = math.ceil(n_items / queue_size)
    if count > calls:
        raise ValueError(
            f"benchmark {bench!r}: shard.count={count} but its {n_items} items make only {calls} engine calls of "
            f"queue_size={queue_size}, and a shard is whole engine calls (each item is decoded beside the same "
            f"items as in one process); set shard.count <= {calls}, or evaluate this benchmark alone with fewer "
            "shards (a smaller queue_size gives more calls but is another run: it is part of the results' key)"
        )
    first, last = index * calls // count, (index + 1) * calls // count
    return range(first * queue_size, min(last * queue_size, n_items))


def part_path(leaf: Path, bench: str, index: int, count: int) -> Path:
    """Returns the predictions part of shard ``index`` of ``count`` in a leaf directory."""
    return leaf / f"{bench}.predictions.shard-{index}-of-{count}.jsonl"


def _part_problem(path: Path, wanted: list[str], chash: str, index: int) -> str | dict[str, dict[str, Any]]:
    """Returns the part's rows by id when it holds every wanted id at ``chash``, else what is wrong with it."""
    if not path.is_file():
        return f"{path}: missing; run shard.index={index}"
    rows: dict[str, dict[str, Any]] = {}
    stale = set()
    for row in read_jsonl(path):
        if row.get("config_hash") != chash:
            stale.add(str(row.get("config_hash")))
        else:
            rows.setdefault(row["id"], row)
    missing = [sid for sid in wanted if sid not in rows]
    if not missing:
        return rows
    if stale:
        return (
            f"{path}: written by another config or other inputs (config_hash {sorted(stale)}, this merge's is "
            f"{chash}); rerun shard.index={index} with this config, or merge with the overrides the shards ran with"
        )
    return (
        f"{path}: {len(missing)} of its {len(wanted)} items missing (first ids {missing[:3]}); the shard did not "
        f"finish: rerun shard.index={index} (it resumes)"
    )


def merge_parts(
    leaf: Path, bench: str, ids: list[str], queue_size: int, count: int, chash: str
) -> dict[str, dict[str, Any]]:
    """Returns every item's prediction row by id, read from the ``count`` shards' parts in ``leaf``.

    Args:
        ids: the benchmark's sample ids in item order (the ids the shards split with ``shard_span``).
        chash: this run's config hash; a part's row counts only if it carries it.

    Raises:
        ValueError: a part is missing, unfinished or from another config; lists every such part and the fix.
    """
    merged: dict[str, dict[str, Any]] = {}
    problems = []
    for index in range(count):
        span = shard_span(len(ids), queue_size, index, count, bench)
        wanted = ids[span.start : span.stop]
        found = _part_problem(part_path(leaf, bench, index, count), wanted, chash, index)
        if isinstance(found, str):
            problems.append(found)
        else:
            merged.update((sid, found[sid]) for sid in wanted)
    if problems:
        raise ValueError(
            f"benchmark {bench!r}: cannot merge shard.count={count} parts; nothing was written:\n  "
            + "\n  ".join(problems)
            + f"\nEach shard runs with the merge's overrides plus shard.count={count} shard.index=<i>."
        )
    return merged


def barrier(timeout_s: int) -> None:
    """Returns once every torchrun rank reached this point (after ``timeout_s`` seconds: raises).

    The group uses gloo (no GPU is needed to wait) and is started from torchrun's environment when nobody
    started one before; a group started here is closed again, since nothing else is exchanged.
    """
    import torch.distributed as dist

    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))
    try:
        dist.barrier()
    finally:
        if started:
            dist.destroy_process_group()


def pin_local_gpu(device: str, environ: Mapping[str, str]) -> None:
    """Makes ``cuda`` mean this torchrun rank's own GPU (``LOCAL_RANK``); a no-op off CUDA.

    The config keeps ``model.device=cuda``, so every rank records the device string a one-process run does.
    """
    import torch

    if device == "cuda" and torch.cuda.is_available():
        torch.cuda.set_device(_env_int(environ, "LOCAL_RANK", "torchrun"))
