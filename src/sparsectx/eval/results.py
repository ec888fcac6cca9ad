"""What an evaluation writes: the result JSON schema, the run key and its hash, provenance, resumable rows.

A results JSON exists only when it is complete (atomic write). Predictions are JSONL rows keyed by
sample id plus the config hash: an interrupted run keeps the rows of its own config, drops any other
(stale) rows and duplicates, and generates only what is missing.
"""

from __future__ import annotations

import json
import logging
import platform
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from sparsectx.hashing import config_hash
from sparsectx.io import atomic_write_text, git_commit, read_jsonl
from sparsectx.redact import redact

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""Bump when a field of ``BenchResult`` (or the Pass@K / efficiency JSON) changes meaning or name."""
RUN_KEY_HASH = {"digits": 16, "compact": True}
"""How a run key is hashed (``hashing.config_hash``) into ``provenance.config_hash`` and every predictions row's
``config_hash``: 16 hex digits of compact JSON. Recorded in every result file, so it never changes."""

PACKAGES = ("sparsectx", "torch", "transformers", "tokenizers", "hydra-core", "omegaconf", "numpy", "pillow")
NOT_IN_KEY = (
    "force",
    "logger",
    "results_root",
    "bench",
    "passk",
    "efficiency",
    "grid",
    "max_skip_fraction",
)
"""Config keys that never change a benchmark's numbers (or are re-added per benchmark / mode)."""
MODEL_NOT_IN_KEY = ("revision", "local_files_only")
"""``model`` keys left out of the run key: where the checkpoint is read from, not what it is; the key's
``weights`` entry is the identity of the snapshot actually read (``loading.snapshot_identity``)."""
INPUT_KEYS = ("bench_sha256", "weights", "cohort_sha256")
"""Run-key entries that fingerprint input content (not config): recorded as ``provenance.inputs``."""


def run_key(resolved: dict[str, Any], bench: str) -> dict[str, Any]:
    """Returns the part of the resolved config that defines one benchmark's result.

    Everything except ``NOT_IN_KEY`` and ``MODEL_NOT_IN_KEY``; plus that benchmark's own spec (so a suite run
    and a single-bench run share results), plus the ``passk`` or ``efficiency`` block when that mode runs.
    """
    key = {name: value for name, value in resolved.items() if name not in NOT_IN_KEY}
    key["model"] = {name: value for name, value in resolved["model"].items() if name not in MODEL_NOT_IN_KEY}
    if resolved["mode"] == "efficiency":
        del key["budget"]  # efficiency measures its own budget list
    key["bench"] = resolved["bench"][bench]
    if resolved["mode"] in ("passk", "efficiency"):
        key[resolved["mode"]] = resolved[resolved["mode"]]
    return key


def package_versions() -> dict[str, str]:
    """Returns the installed version of each package in ``PACKAGES`` ("missing" if absent)."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def hardware(device: str) -> dict[str, Any]:
    """Returns the device string, the GPU name (None on CPU) and the CPU architecture."""
    gpu = None
    if device.startswith("cuda") and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(torch.device(device))
    return {
        "device": device,
        "gpu": gpu,
        "machine": platform.machine(),
        "torch_threads": torch.get_num_threads(),
    }


def provenance(resolved: dict[str, Any], key: dict[str, Any], device: str) -> dict[str, Any]:
    """Returns the provenance block of every output: config and run-key hash, input digests, git, packages,
    hardware. The config is recorded redacted (``sparsectx.redact``); the hash is of the run key as given."""
    return {
        "schema_version": SCHEMA_VERSION,
        "config": redact(resolved),
        "config_hash": config_hash(key, **RUN_KEY_HASH),
        "inputs": {name: key[name] for name in INPUT_KEYS if name in key},
        "git": git_commit(Path(__file__).resolve().parent),
        "packages": package_versions(),
        "hardware": hardware(device),
    }


@dataclass
class BenchResult:
    """The result JSON of one benchmark in one leaf (``<leaf>/<bench>.json``).

    The first six fields are what the table code reads (``sparsectx.report.tables.ResultRecord``).
    """

    method: str
    pruner: str
    budget: float
    benchmark: str
    score: float
    """The scorer's headline ``score`` (its scale: percent; out of 1000 for OCRBench; summed for MME)."""
    scorer_version: int
    scorer: str
    extractor_version: int
    metrics: dict[str, float]
    """Everything the scorer returned."""
    dataset_name: str
    experiment: str
    seed: int
    pruner_params: dict[str, Any]
    model: dict[str, Any]
    """Name, path, checkpoint and its fingerprint, random_weights flag, dtype, device, attention backend."""
    n_rows: int
    """Rows in the benchmark file(s), skipped and dropped ones included."""
    n_scored: int
    n_skipped: int
    """Rows the reader could not use, at most ``max_skip_fraction`` of the rows not dropped."""
    skipped: list[dict[str, str]]
    """``{"index", "reason"}`` of every row the reader could not use."""
    n_dropped: int
    """Rows the benchmark's layout drops as VLMEvalKit drops them (``n_rows - n_scored - n_skipped``)."""
    drop_rows: list[str]
    """The layout's drop rules (``bench.<name>.layout.drop_rows``, e.g. ``no_image``)."""
    extraction: dict[str, int]
    """Counts of extraction statuses: ``tagged``, ``fallback`` (no answer tags, lenient rule used),
    ``empty`` and ``error`` (generation failed)."""
    n_failed: int
    """``empty`` + ``error``: items with no usable answer (scored as wrong)."""
    n_truncated: int
    """Generations cut by the benchmark's ``max_new_tokens`` before the stop string or the end of turn (their
    answers, often missing, are scored as extracted): a share far above 0 says the cap is too small for the
    model's reasoning."""
    mean_kept_visual: float
    generation: dict[str, Any]
    batch_size: int
    resumed_rows: int
    """Prediction rows reused from an interrupted run of the same config."""
    wall_time_s: float
    """Wall time of the invocation that finished the benchmark."""
    provenance: dict[str, Any]
    """``schema_version``, resolved ``config``, ``config_hash`` (of the run key), ``inputs`` (the benchmark
    file's sha256 and the weights' fingerprint, both in the run key), ``git``, ``packages``, ``hardware``."""


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Writes ``payload`` as indented key-sorted JSON, atomically."""
    atomic_write_text(path, json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")


def finished(path: Path, chash: str) -> bool:
    """Returns whether ``path`` holds a complete output of the run whose key hashes to ``chash``.

    A torn file, one that is not a JSON object or one without the matching ``provenance.config_hash`` is
    not finished: it is recomputed (and replaced atomically), never trusted.
    """
    if not path.is_file():
        return False
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        log.warning("%s is not valid JSON (a torn or damaged write); recomputing it", path)
        return False
    provenance = payload.get("provenance") if isinstance(payload, dict) else None
    if not isinstance(provenance, dict):
        log.warning("%s is not a result JSON (no provenance object); recomputing it", path)
        return False
    return provenance.get("config_hash") == chash


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """Replaces ``path`` atomically with ``rows`` as JSONL."""
    atomic_write_text(path, "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))


def resume_rows(path: Path, chash: str, wanted: set[str], key: str) -> dict[str, dict[str, Any]]:
    """Returns the reusable rows of an interrupted run by ``row[key]``; rewrites the file to hold only them.

    A row is reused when its ``config_hash`` is ``chash``, its key is in ``wanted``, it is the first row
    with that key, and its ``status`` is not ``error`` (failed generations are retried). Anything else
    (another config's rows, duplicates, a torn last line) is dropped from the file.
    """
    rows = read_jsonl(path)
    kept: dict[str, dict[str, Any]] = {}
    for row in rows:
        rid = row.get(key)
        if row.get("config_hash") == chash and rid in wanted and rid not in kept and row.get("status") != "error":
            kept[rid] = row
    if path.exists():  # also drops a torn last line, so later appends start on a fresh line
        write_rows(path, list(kept.values()))
    return kept


def as_dict(result: BenchResult) -> dict[str, Any]:
    """Returns the JSON payload of a ``BenchResult``."""
    return asdict(result)
