"""Reads an offline W&B run back: the protobuf records of its ``run-<id>.wandb`` file and its table files.

The ``.wandb`` file is W&B's transaction log: a 7-byte header (``:W&B``, magic, version) then LevelDB-log
records (32 KiB blocks; each chunk a 4-byte checksum, 2-byte little-endian length, 1-byte type: 1 full,
2 first, 3 middle, 4 last), each payload one ``wandb.proto.wandb_internal_pb2.Record``. No tests here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2 as pb

BLOCK = 32768
HEADER = 7


def records(path: Path) -> Iterator[pb.Record]:
    """Yields every record of an offline run's ``.wandb`` file, in order."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        if left < HEADER or (kind == 0 and length == 0):  # block trailer / zero padding
            pos += left
            continue
        payload = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        pending = payload if kind in (1, 2) else pending + payload
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            yield record


def run_records(run_dir: Path) -> list[pb.Record]:
    """Returns the records of the offline run in ``run_dir`` (``.../wandb/offline-run-*``)."""
    (log,) = run_dir.glob("run-*.wandb")
    return list(records(log))


def history(run_dir: Path) -> list[dict[str, Any]]:
    """Returns the run's logged history rows: {key: decoded value} per step (``_step`` included).

    A table value is a dict (``_type`` ``table-file``, ``path``, ``nrows`` ...): W&B sends its fields as
    items with a nested key ``[key, field]``, put back together here.
    """
    rows = []
    for record in run_records(run_dir):
        if record.WhichOneof("record_type") != "history":
            continue
        row: dict[str, Any] = {}
        for item in record.history.item:
            value = item.value_json and json.loads(item.value_json)
            if item.key or len(item.nested_key) == 1:
                row[item.key or item.nested_key[0]] = value
            else:
                *outer, last = item.nested_key
                row.setdefault("/".join(outer), {})[last] = value
        rows.append(row)
    return rows


def run_info(run_dir: Path) -> pb.RunRecord:
    """Returns the run's own record (group, job type, tags, name)."""
    return next(r.run for r in run_records(run_dir) if r.WhichOneof("record_type") == "run")


def table(run_dir: Path, ref: dict[str, Any]) -> dict[str, Any]:
    """Returns the table file (columns, data) a history value of ``_type`` ``table-file`` points at."""
    assert ref["_type"] == "table-file", ref
    return json.loads((run_dir / "files" / ref["path"]).read_text())


def artifacts(run_dir: Path) -> list[pb.ArtifactRecord]:
    """Returns the artifacts the run logged."""
    return [r.artifact for r in run_records(run_dir) if r.WhichOneof("record_type") == "artifact"]


def artifact_table(run_dir: Path, ref: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Path]]:
    """Returns the full table (media cells as references) of a history value and its media files by path.

    W&B stores a logged table, with its images, as a ``run_table`` artifact; offline, the artifact's files
    wait in W&B's staging folder (under ``WANDB_DATA_DIR``) for ``wandb sync``.
    """
    client_id, _, name = ref["artifact_path"].removeprefix("wandb-client-artifact://").partition("/")
    (artifact,) = [a for a in artifacts(run_dir) if a.client_id == client_id]
    files = {entry.path: Path(entry.local_path) for entry in artifact.manifest.contents}
    return json.loads(files[name].read_text()), files
