"""Result tables in the papers' shape (rendered as Markdown, LaTeX and CSV by ``sparsectx.report.render``).

Shape (SCOPD Table 1, LT-OPD Table 2): one block of rows per visual-token budget, largest budget
first; the full-context reference row ("Vanilla" at budget 1.0) opens the table and is the row
every other row is normalised by; columns are the benchmarks, then the average retain ratio
(``sparsectx.eval.aggregate.retain_ratio``). Within each budget block and column the best value
is bold and the second best underlined (compared as displayed, so ties share a mark; blocks with
fewer than two values get no marks). A cell without a score is shown as "—" and its reason is
listed in a numbered footnote, never dropped; a scored cell with a caveat (its score is over fewer rows
than the benchmark file holds) keeps its value and gets a numbered footnote too. Records of one benchmark
must share one scorer version and one extractor version (style convention 21).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields

from sparsectx.budget import check_budget
from sparsectx.eval.aggregate import retain_ratio

MISSING = "—"
NO_RECORD = "no result record"
AVERAGE_CAVEAT = "averages a score with a caveat (footnoted in its column or in the full-context row)"


@dataclass(frozen=True)
class ResultRecord:
    """One (method, pruner, budget, benchmark) score, as the table code reads it."""

    method: str
    pruner: str
    budget: float
    """Kept fraction of visual tokens, in (0, 1]; 1.0 is the full-context row."""
    benchmark: str
    score: float | None
    """Headline ``score`` of the benchmark's scorer; ``None`` when there is none (say why in ``reason``)."""
    scorer_version: int
    extractor_version: int | None = None
    """Version of the answer extractor the predictions went through (``sparsectx.eval.extract``)."""
    reason: str = ""
    """Why ``score`` is ``None`` (e.g. "generation failed on 12% of items"); shown in the footnote."""
    caveat: str = ""
    """What qualifies a score that is shown (e.g. "scored on 10 of 12 rows"); shown in a footnote."""


@dataclass(frozen=True)
class Spread:
    """A shown value's uncertainty (``sparsectx.report.uncertainty``): its bootstrap interval, the standard
    deviation over training seeds (rows pooled over several), and ``shift``: ``"up"`` / ``"down"`` when the
    row is trained and its difference to the untrained row at the same pruner and budget has an interval
    above / below 0 (else "")."""

    lo: float
    hi: float
    std: float | None = None
    shift: str = ""


def shift_of(lo: float, hi: float) -> str:
    """Returns ``Spread.shift`` of a difference's interval: ``"up"`` above 0, ``"down"`` below 0, else ""."""
    return "up" if lo > 0 else "down" if hi < 0 else ""


@dataclass(frozen=True)
class Cell:
    """One displayed cell: its value, text, mark (``"best"``, ``"second"`` or ``""``), footnote and spread."""

    value: float | None
    text: str
    mark: str = ""
    note: int | None = None
    spread: Spread | None = None


@dataclass(frozen=True)
class Row:
    method: str
    pruner: str
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class Block:
    budget: float
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Table:
    """A built table; ``columns`` are the benchmarks and then the average column."""

    columns: tuple[str, ...]
    blocks: tuple[Block, ...]
    notes: tuple[tuple[str, tuple[str, ...]], ...]
    """Footnote ``i + 1``: (reason, cells it applies to as "method / pruner / budget: column")."""
    caveats: frozenset[int] = frozenset()
    """Numbers of the footnotes on scored cells (``ResultRecord.caveat``); the others mark missing cells."""
    remarks: tuple[str, ...] = ()
    """Unnumbered notes printed under the table (how its intervals were made, which cells have none)."""
    decimals: int = 2
    """Digits after the point of every shown number (the intervals are printed with them too)."""


def to_records(rows: Iterable[ResultRecord | Mapping[str, object]]) -> list[ResultRecord]:
    """Returns ``rows`` as ``ResultRecord``s; dicts must have exactly the record's field names."""
    names = {f.name for f in fields(ResultRecord)}
    required = {f.name for f in fields(ResultRecord) if f.name not in ("reason", "caveat", "extractor_version")}
    records = []
    for i, row in enumerate(rows):
        if isinstance(row, ResultRecord):
            record = row
        else:
            unknown, absent = sorted(set(row) - names), sorted(required - set(row))
            if unknown or absent:
                raise ValueError(f"result row {i}: unknown keys {unknown}, missing keys {absent}; fields: {names}")
            record = ResultRecord(**row)  # type: ignore[arg-type]
        check_budget(record.budget, f"result row {i} budget")
        if type(record.scorer_version) is not int:
            raise ValueError(f"result row {i}: scorer_version={record.scorer_version!r} must be an int")
        if record.extractor_version is not None and type(record.extractor_version) is not int:
            raise ValueError(f"result row {i}: extractor_version={record.extractor_version!r} must be an int")
        if record.score is not None and not math.isfinite(record.score):
            raise ValueError(f"result row {i}: score={record.score!r}; record a missing score as None + reason")
        records.append(record)
    return records


def check_versions(records: Iterable[ResultRecord]) -> dict[str, tuple[int, int | None]]:
    """Returns benchmark -> (scorer version, extractor version); raises if a benchmark mixes either.

    ``extractor_version=None`` (not recorded) counts as a version of its own, so it cannot be mixed
    with recorded ones either.
    """
    versions: dict[str, dict[str, set]] = {}
    for record in records:
        seen = versions.setdefault(record.benchmark, {"scorer_version": set(), "extractor_version": set()})
        seen["scorer_version"].add(record.scorer_version)
        seen["extractor_version"].add(record.extractor_version)
    for bench, seen in versions.items():
        for kind, values in seen.items():
            if len(values) > 1:
                raise ValueError(
                    f"benchmark {bench!r} mixes {kind} values {sorted(values, key=str)}; re-score the older "
                    f"results with one version before tabulating"
                )
    return {bench: (seen["scorer_version"].pop(), seen["extractor_version"].pop()) for bench, seen in versions.items()}


def budget_label(budget: float) -> str:
    """Returns the block heading for a budget, e.g. "Retain 10% visual tokens"."""
    if budget == 1.0:
        return "Full visual context (100% tokens)"
    return f"Retain {budget * 100:g}% visual tokens"


def _index(records: list[ResultRecord], benchmarks: Sequence[str]) -> dict[tuple, ResultRecord]:
    by_key: dict[tuple, ResultRecord] = {}
    for r in records:
        if r.benchmark not in benchmarks:
            raise ValueError(f"record {r} names benchmark {r.benchmark!r}, which is not in {list(benchmarks)}")
        key = (r.method, r.pruner, r.budget, r.benchmark)
        if key in by_key:
            raise ValueError(f"two results for method/pruner/budget/benchmark {key}; keep one")
        by_key[key] = r
    return by_key


def _reference(records: list[ResultRecord], reference_method: str) -> tuple[str, str] | None:
    pruners = sorted({r.pruner for r in records if r.method == reference_method and r.budget == 1.0})
    if len(pruners) > 1:
        raise ValueError(f"{reference_method} has several full-context rows (pruners {pruners}); keep one")
    return (reference_method, pruners[0]) if pruners else None


def _row_order(records: list[ResultRecord], reference_method: str, methods: Sequence[str] | None) -> list:
    seen = list(dict.fromkeys((r.method, r.pruner) for r in records))
    order = list(methods) if methods is not None else list(dict.fromkeys(m for m, _ in seen))
    order = [reference_method] + [m for m in order if m != reference_method]
    unknown = sorted({m for m, _ in seen} - set(order))
    if unknown:
        raise ValueError(f"methods {unknown} have results but are not in methods={list(order)}")
    return sorted(seen, key=lambda mp: order.index(mp[0]))


def _mark(rows: list[list[Cell]], decimals: int) -> list[list[Cell]]:
    for col in range(len(rows[0]) if rows else 0):
        shown = {round(row[col].value, decimals) for row in rows if row[col].value is not None}
        valued = sum(row[col].value is not None for row in rows)
        if valued < 2:
            continue
        ranked = sorted(shown, reverse=True)
        marks = {ranked[0]: "best", **({ranked[1]: "second"} if len(ranked) > 1 else {})}
        for row in rows:
            cell = row[col]
            if cell.value is not None:
                mark = marks.get(round(cell.value, decimals), "")
                row[col] = Cell(cell.value, cell.text, mark, cell.note, cell.spread)
    return rows


def build_table(
    records: Iterable[ResultRecord | Mapping[str, object]],
    *,
    benchmarks: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    reference_method: str = "Vanilla",
    avg_label: str = "Avg",
    decimals: int = 2,
    spreads: Mapping[tuple[str, str, float, str], Spread] | None = None,
    remarks: Sequence[str] = (),
) -> Table:
    """Returns the table of ``records``: budget blocks, marked cells and footnotes for missing ones.

    Args:
        records: Result records or dicts with the ``ResultRecord`` fields.
        benchmarks: Column order; default: order of first appearance. Records of other
            benchmarks are an error.
        methods: Row order within a block; default: order of first appearance. The reference
            method always comes first.
        reference_method: Method whose budget-1.0 row normalises the average column.
        avg_label: Heading of the average retain ratio column.
        decimals: Digits shown; marks compare values rounded to this.
        spreads: (method, pruner, budget, column) -> the interval of that cell's value, when it has one.
        remarks: Unnumbered notes printed under the table.
    """
    recs = to_records(records)
    if not recs:
        raise ValueError("build_table got no result records")
    check_versions(recs)
    benches = list(benchmarks) if benchmarks is not None else list(dict.fromkeys(r.benchmark for r in recs))
    by_key = _index(recs, benches)
    full, avg_blocker = _reference_scores(recs, by_key, benches, reference_method)
    ref = _reference(recs, reference_method)
    ref_caveat = ref is not None and any((r := by_key.get((*ref, 1.0, b))) and r.caveat for b in benches)
    notes: dict[str, list[str]] = {}
    caveats: set[str] = set()
    blocks = []
    for budget in sorted({r.budget for r in recs}, reverse=True):
        order = _row_order(recs, reference_method, methods)
        rows = [mp for mp in order if any(k[:3] == (*mp, budget) for k in by_key)]
        grid = [
            _row_cells(
                by_key, (m, p, budget), benches, full, avg_blocker, ref_caveat, notes, caveats, avg_label, decimals
            )
            for m, p in rows
        ]
        marked = _mark(_spread(grid, rows, budget, (*benches, avg_label), spreads or {}), decimals)
        blocks.append(Block(budget, tuple(Row(m, p, tuple(c)) for (m, p), c in zip(rows, marked, strict=True))))
    return Table(
        columns=(*benches, avg_label),
        blocks=tuple(blocks),
        notes=tuple((reason, tuple(where)) for reason, where in notes.items()),
        caveats=frozenset(i for i, reason in enumerate(notes, start=1) if reason in caveats),
        remarks=tuple(remarks),
        decimals=decimals,
    )


def _spread(
    grid: list[list[Cell]],
    rows: list[tuple[str, str]],
    budget: float,
    columns: tuple[str, ...],
    spreads: Mapping[tuple[str, str, float, str], Spread],
) -> list[list[Cell]]:
    """Returns ``grid`` with each valued cell's spread attached (from ``spreads``, when it has one)."""
    return [
        [
            Cell(
                c.value,
                c.text,
                c.mark,
                c.note,
                spreads.get((m, p, budget, col)) if c.value is not None else None,
            )
            for c, col in zip(cells, columns, strict=True)
        ]
        for (m, p), cells in zip(rows, grid, strict=True)
    ]


def _reference_scores(
    recs: list[ResultRecord], by_key: dict[tuple, ResultRecord], benches: list[str], reference_method: str
) -> tuple[dict[str, float], str | None]:
    """Returns the reference row's scores, or a reason why no average can be computed."""
    ref = _reference(recs, reference_method)
    if ref is None:
        return {}, f"no full-context {reference_method} row (budget 1.0) to normalise by"
    full = {b: r.score for b in benches if (r := by_key.get((*ref, 1.0, b))) is not None and r.score is not None}
    absent = [b for b in benches if b not in full]
    return full, (f"{reference_method} at 100% has no score for {', '.join(absent)}" if absent else None)


def _row_cells(
    by_key: dict[tuple, ResultRecord],
    row: tuple[str, str, float],
    benches: list[str],
    full: dict[str, float],
    avg_blocker: str | None,
    ref_caveat: bool,
    notes: dict[str, list[str]],
    caveats: set[str],
    avg_label: str,
    decimals: int,
) -> list[Cell]:
    """Returns one row's cells; each missing cell's reason, or scored cell's caveat, and its place is appended
    to ``notes`` (caveats also to ``caveats``). The average inherits a caveat of the row or of the
    full-context row (``ref_caveat``) as ``AVERAGE_CAVEAT``."""
    where = f"{row[0]} / {row[1]} / {row[2] * 100:g}%"

    def note(reason: str, column: str) -> int:
        notes.setdefault(reason, []).append(f"{where}: {column}")
        return list(notes).index(reason) + 1

    def missing(reason: str, column: str) -> Cell:
        return Cell(None, MISSING, "", note(reason, column))

    cells, scores = [], {}
    for bench in benches:
        rec = by_key.get((*row, bench))
        if rec is None or rec.score is None:
            cells.append(missing(rec.reason if rec and rec.reason else NO_RECORD, bench))
        else:
            scores[bench] = rec.score
            if rec.caveat:
                caveats.add(rec.caveat)
            number = note(rec.caveat, bench) if rec.caveat else None
            cells.append(Cell(rec.score, f"{rec.score:.{decimals}f}", "", number))
    zero = [bench for bench in benches if full.get(bench) == 0]
    if avg_blocker is None and zero:
        avg_blocker = f"retain ratio undefined: the full-context score is 0 on {', '.join(zero)}"
    if avg_blocker is None and len(scores) < len(benches):
        avg_blocker = "the average needs a score on every benchmark"
    if avg_blocker is not None:
        return [*cells, missing(avg_blocker, avg_label)]
    avg = retain_ratio(scores, full)
    inherited = ref_caveat or any(cell.note is not None for cell in cells)
    if inherited:
        caveats.add(AVERAGE_CAVEAT)
    return [
        *cells,
        Cell(avg, f"{avg:.{decimals}f}", "", note(AVERAGE_CAVEAT, avg_label) if inherited else None),
    ]
