"""Build a training TSV from downloaded datasets: read, filter, draw by quota, balance, write atomically.

The output is what ``sparsectx.training`` reads (``train_data.path``, ``sparsectx.data.read_tsv``):
VLMEvalKit's layout with ``index`` 0..N-1 in sampler order, the downloaded image file as base64,
``question``, ``answer``, ``category`` = the source's name, ``trace`` (``<think>…</think><answer>…</answer>``
or ""), and two extra columns: ``source_id`` (the row's id in its dataset) and, with a balanced sampler,
``batch`` (0..num_batches-1). The same files and config give the same bytes; a second file
``<out_path stem>.report.json`` counts every dropped row by source and reason.

Memory: the drawn images are held until the file is written (LT-14K: 14,000 images, about 2 GB for
COCO-sized JPEGs); a JSON-array source is parsed whole (LLaVA's 1 GB ``llava_v1_5_mix665k.json``: several GB).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from sparsectx.data.sources.config import SourceConfig, TrainingSetConfig
from sparsectx.data.sources.images import load_images
from sparsectx.data.sources.records import read_rows, resolve_files
from sparsectx.data.sources.rows import FILTERED, PROBLEM, Candidate, Drop, parse_row
from sparsectx.data.sources.sampler import draw_order, interleave
from sparsectx.data.tsv import OUR_COLUMNS
from sparsectx.io import atomic_write_json, atomic_write_stream

log = logging.getLogger(__name__)


@dataclass
class SourceCounts:
    """What happened to one source's rows: read, drawn, and every drop by reason."""

    rows: int = 0
    drawn: int = 0
    filtered: Counter[str] = field(default_factory=Counter)
    """Rows the source's rule leaves out (not budgeted)."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Rows dropped for bad input (budgeted by ``training_set.skip_budget``)."""
    first: dict[str, str] = field(default_factory=dict)
    """Reason -> the first row dropped for it (``<file> <row>: <detail>``), so every reason names a row."""


@dataclass
class SkipLedger:
    """Counts every dropped row; the first problem beyond the budget raises, naming its file and row."""

    budget: int
    counts: dict[str, SourceCounts]
    problems: int = 0

    def drop(self, source: str, file: Path, label: str, drop: Drop) -> None:
        """Returns None after counting ``drop``; raises ValueError when it is a problem over the budget."""
        counts = self.counts[source]
        counts.first.setdefault(drop.reason, f"{file} {label}: {drop.detail}")
        if drop.kind == FILTERED:
            counts.filtered[drop.reason] += 1
            return
        counts.skipped[drop.reason] += 1
        self.problems += 1
        if self.problems > self.budget:
            so_far = {name: dict(c.skipped) for name, c in self.counts.items() if c.skipped}
            raise ValueError(
                f"{file} {label}: {drop.reason}: {drop.detail}. This is dropped row {self.problems}, over "
                f"training_set.skip_budget={self.budget} (dropped so far: {so_far}); fix the row or the "
                "download, or raise training_set.skip_budget"
            )


@dataclass(frozen=True)
class TrainingSetReport:
    """The written file, its digest and size in rows, and every source's counts."""

    path: Path
    sha256: str
    rows: int
    sources: dict[str, SourceCounts]


def collect(name: str, source: SourceConfig, ledger: SkipLedger) -> list[Candidate]:
    """Returns the source's usable candidates in file order (files sorted), counting every dropped row."""
    key = f"training_set.sources.{name}"
    candidates = []
    for path in resolve_files(source.files, f"{key}.files"):
        for raw in read_rows(path, source.format, source.fields["image"]):
            ledger.counts[name].rows += 1
            parsed = parse_row(raw, name, source)
            if isinstance(parsed, Drop):
                ledger.drop(name, raw.file, raw.label, parsed)
            else:
                candidates.append(parsed)
    return candidates


def draw(
    name: str, source: SourceConfig, candidates: list[Candidate], ledger: SkipLedger, cfg: TrainingSetConfig
) -> list[tuple[Candidate, bytes]]:
    """Returns ``source.quota`` candidates with checked image bytes, in draw order (``sampler`` rule 1)."""
    order = draw_order(len(candidates), source.seed)
    accepted: list[tuple[Candidate, bytes]] = []
    cursor = 0
    while len(accepted) < source.quota and cursor < len(order):
        chunk = [candidates[i] for i in order[cursor : cursor + source.quota - len(accepted)]]
        cursor += len(chunk)
        for candidate, loaded in zip(
            chunk,
            load_images([c.image for c in chunk], source.fields["image"], cfg.min_image_side, cfg.max_aspect_ratio),
            strict=True,
        ):
            drop = image_problem(candidate, loaded.data, loaded.reason, loaded.detail)
            if drop is not None:
                ledger.drop(name, candidate.file, candidate.label, drop)
            else:
                accepted.append((candidate, loaded.data))
    if len(accepted) < source.quota:
        counts = ledger.counts[name]
        raise ValueError(
            f"training_set.sources.{name}: {len(accepted)} usable rows for quota {source.quota} ({counts.rows} "
            f"read from {source.files}; filtered {dict(counts.filtered)}, dropped {dict(counts.skipped)}); "
            f"lower training_set.sources.{name}.quota or add files"
        )
    ledger.counts[name].drawn = len(accepted)
    return accepted


def image_problem(candidate: Candidate, data: bytes | None, reason: str, detail: str) -> Drop | None:
    """Returns the drop for a drawn row whose image failed its checks or its published sha256, else None."""
    if data is None:
        return Drop(PROBLEM, reason, detail)
    if candidate.sha256 and hashlib.sha256(data).hexdigest() != candidate.sha256:
        return Drop(PROBLEM, "image sha256 mismatch", f"{candidate.image} is not the annotated image")
    return None


def arrange(cfg: TrainingSetConfig, drawn: dict[str, list[tuple[Candidate, bytes]]]) -> list[tuple[Candidate, bytes]]:
    """Returns every drawn row in file order: the balanced sampler's slots (``sampler`` rule 2), or, without
    batches, the one source's draw order."""
    if cfg.batch_size is None:
        return next(iter(drawn.values()))
    queues = {name: iter(rows) for name, rows in drawn.items()}
    return [next(queues[name]) for name in interleave({n: s.quota for n, s in cfg.sources.items()})]


def header(batched: bool) -> list[str]:
    """Returns the TSV header: ``sparsectx.data.tsv.columns_for``'s order for rows without options."""
    extra = ["batch", "source_id"] if batched else ["source_id"]
    return ["index", "image", "question", "answer", "category", *OUR_COLUMNS, *extra]


def write_rows(stream: BinaryIO, rows: list[tuple[Candidate, bytes]], batch_size: int | None) -> None:
    """Writes the header and one TSV line per row to ``stream``, one row at a time (no whole-file buffer)."""
    columns = header(batch_size is not None)
    for number, entry in enumerate([None, *rows]):
        buffer = io.StringIO()
        writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
        if entry is None:
            writer.writerow(columns)
        else:
            candidate, data = entry
            cells = {
                "index": str(number - 1),
                "image": base64.b64encode(data).decode("ascii"),
                "question": candidate.question,
                "answer": candidate.answer,
                "category": candidate.source,
                "trace": candidate.trace,
                "source_id": candidate.source_id,
            }
            if batch_size is not None:
                cells["batch"] = str((number - 1) // batch_size)
            writer.writerow([cells.get(column, "") for column in columns])
        stream.write(buffer.getvalue().encode("utf-8"))


def build_training_set(cfg: TrainingSetConfig) -> TrainingSetReport:
    """Returns the report after writing ``cfg.out_path`` and its ``.report.json``, both atomically.

    Raises:
        FileNotFoundError: a source's ``files`` entry names nothing.
        ValueError: dropped rows exceed ``skip_budget`` (naming the file and row), or a source has fewer
            usable rows than its quota.
    """
    ledger = SkipLedger(cfg.skip_budget, {name: SourceCounts() for name in cfg.sources})
    drawn = {}
    for name, source in cfg.sources.items():
        candidates = collect(name, source, ledger)
        drawn[name] = draw(name, source, candidates, ledger, cfg)
    rows = arrange(cfg, drawn)
    out = Path(cfg.out_path)
    written = atomic_write_stream(
        out, lambda stream: write_rows(stream, rows, cfg.batch_size), "the partial file was removed"
    )
    report = TrainingSetReport(out, written.sha256, len(rows), ledger.counts)
    atomic_write_json(out.with_suffix(".report.json"), report_json(cfg, report))
    for name, counts in ledger.counts.items():
        log.info(
            "%s: %d rows read, %d drawn, filtered %s, dropped %s",
            name,
            counts.rows,
            counts.drawn,
            dict(counts.filtered),
            dict(counts.skipped),
        )
    log.info("wrote %s (%d rows, sha256 %s)", out, len(rows), written.sha256)
    return report


def report_json(cfg: TrainingSetConfig, report: TrainingSetReport) -> dict[str, object]:
    """Returns the report as JSON-ready data (counts by source and reason, the file's digest)."""
    return {
        "name": cfg.name,
        "path": str(report.path),
        "sha256": report.sha256,
        "rows": report.rows,
        "skip_budget": cfg.skip_budget,
        "sources": {
            name: {
                "quota": cfg.sources[name].quota,
                "seed": cfg.sources[name].seed,
                "rows_read": counts.rows,
                "drawn": counts.drawn,
                "filtered": dict(sorted(counts.filtered.items())),
                "dropped": dict(sorted(counts.skipped.items())),
                "first_row_per_reason": dict(sorted(counts.first.items())),
            }
            for name, counts in report.sources.items()
        },
    }
