"""``make_tables.py``: every table and figure of one experiment, from its grid and its results tree.

For each ``tables:`` block of the experiment's grid (``conf/experiment/<e>.yaml``) this writes
``<results_root>/<e>/tables/<block>.md|.tex|.csv``: rows grouped by budget, Vanilla (the untrained model at
budget 1.0) first, an average retain ratio column, and every cell without a score footnoted with its reason
(the grid's declared one, or "no result record"). Blocks with trained methods also get
``<block>.recovery.md|.tex|.csv``. Then the plots (retain ratio and recovery against budget, Pass@K, retain
ratio against prefill FLOPs and KV cache: PNG and SVG, each with its caption ``<plot>.caption.md``: how to read
it and its notes), ``passk.md|.csv`` and
``efficiency.md|.csv`` when the grid has those blocks, and ``README.md``, an index of everything written.
The outputs are logged to the tracker (``logger``): tables as W&B tables, plots as images.

With no preset (``grid: null``: ``experiment=<a name of your own>``, or ``grid=null`` beside a preset's name) the
grid is the one of whatever was run under ``<results_root>/<e>/`` (``sparsectx.report.discover``): one table per
model, the Pass@K and efficiency tables when such files exist, every missing cell footnoted as not run. With a
preset, the results there that its grid does not table are named in a notice.

Schema of ``conf/make_tables.yaml``: ``TablesConfig`` (struct mode; no defaults in code).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sparsectx import workflow as wf
from sparsectx.checks import check_choice
from sparsectx.config_schema import load_config
from sparsectx.io import atomic_write_text
from sparsectx.paths import path_name
from sparsectx.protocol.study import CARD_FILE, card_markdown, study_card
from sparsectx.report.analyses import (
    Figure,
    SideTable,
    efficiency_table,
    figure_notes,
    has_block,
    passk_outputs,
    retain_plots,
)
from sparsectx.report.blocks import Rendered, delta_table, has_trained, recovery_table, render, score_tables
from sparsectx.report.bootstrap import BootstrapConfig
from sparsectx.report.budget_plots import cost_plots, recovery_plots
from sparsectx.report.collect import SCORE_SOURCES, Entry, collect_results
from sparsectx.report.discover import (
    Found,
    discover,
    experiments_with_results,
    found_grid,
    found_line,
    left_out,
    not_run,
    nothing_found,
    outside_grid,
    outside_notice,
)
from sparsectx.report.extras import Page, report_outputs
from sparsectx.report.plots import caption_path
from sparsectx.report.seeds import check_seed_list, check_trained, pooled_entries
from sparsectx.report.sweeps import sweep_outputs
from sparsectx.report.tables import NO_RECORD
from sparsectx.report.uncertainty import BlockSpreads, Replicates, block_spreads, cell_replicates
from sparsectx.tracking import LoggerConfig, Tracker, start_run
from sparsectx.workflow.select import selected_blocks

TABLES_DIR = "tables"
"""Folder under ``<results_root>/<experiment>/`` holding every output (the Snakemake rule's directory)."""


@dataclass
class TablesConfig:
    """The whole ``make_tables.py`` job (``conf/make_tables.yaml``)."""

    experiment: str
    """Stem of the ``conf/experiment`` preset (select it with ``experiment=<name>``); equals ``grid.name``. With
    ``grid`` null, any name: the folder ``<results_root>/<experiment>/`` whose results are tabled as found."""
    grid: Any
    """The preset's ``grid:`` block (``sparsectx.workflow``); checked against the workflow schema. Null: the grid
    of whatever was run under the name (``sparsectx.report.discover``)."""
    logger: LoggerConfig
    results_root: str
    """Root the results leaves live under; outputs go to ``<results_root>/<experiment>/tables``."""
    runs_root: str
    """Root the training runs live under (their ``steps.jsonl`` feed ``grid.report``'s cost and dynamics)."""
    decimals: int
    """Digits after the point in every displayed number (marks compare values rounded to it)."""
    avg_label: str
    """Heading of the average retain ratio column."""
    method_labels: dict[str, str]
    """Method key -> displayed name; ``base`` (the untrained model) is required and names the reference
    row (Vanilla). A method without an entry is shown by its key."""
    allow_empty: bool
    """false: a table with no result at all fails the run (after writing it); true: it is written and logged."""
    score_source: str
    """``sparsectx`` (the project's scorers) or ``vlmeval`` (VLMEvalKit's own evaluate of the same
    predictions, added to each result by ``src/vlmeval_score.py``); the table titles say which."""
    bootstrap: BootstrapConfig
    """The paired bootstrap over items behind every interval (``sparsectx.report.bootstrap``)."""
    train_seeds: list[int] | None
    """Training seeds pooled in every trained row (mean ± std over seeds, bootstrap over items and seeds);
    null = the grid's one seed. Seed ``s`` other than ``grid.seed`` reads ``<results_root>/seed<s>/``
    (``sparsectx.report.seeds``)."""
    blocks: list[str] | None
    grid_files: list[str]
    """YAML files whose ``grid:`` keys replace the preset's, whole, in order: the ``--configfile`` files that gave
    the DAG a reduced grid (the Snakefile passes them), so the tables are those of the grid the jobs ran."""
    """Names of the grid's blocks to render (``tables`` entries, ``passk``, ``efficiency``); null = all. A
    partial study renders the blocks whose runs finished; the seed and emptiness checks see only those."""

    def __post_init__(self) -> None:
        if self.grid is None:
            path_name(self.experiment, "experiment")  # it names the folder read and the one written
            if discover(self.results_root, self.experiment).empty:  # a mistyped name: refused before any write
                raise ValueError(nothing_found(self.results_root, self.experiment))
            for key, value in (("train_seeds", self.train_seeds), ("grid_files", self.grid_files)):
                if value:
                    known = sorted(p.stem for p in (wf.CONF_DIR / "experiment").glob("*.yaml"))
                    raise ValueError(
                        f"{key}={value} applies to a preset's grid, but grid is null (no preset: the results under "
                        f"{self.results_root}/{self.experiment}/ are tabled as found): drop {key}, or choose a "
                        f"preset with experiment=<preset>, one of {known}"
                    )
        if self.decimals < 0:
            raise ValueError(f"decimals={self.decimals} must be >= 0")
        check_choice(self.score_source, SCORE_SOURCES, "score_source")
        if wf.BASE not in self.method_labels:
            raise ValueError(f"method_labels lacks {wf.BASE!r}: set method_labels.{wf.BASE}=Vanilla")
        check_seed_list(self.train_seeds)
        if not self.results_root:
            raise ValueError("results_root is empty; set it to the directory holding <experiment>/ (e.g. results)")


def load_tables_config(cfg: DictConfig) -> TablesConfig:
    """Returns the composed config as a checked ``TablesConfig``; unknown, missing or mistyped keys raise, all at
    once."""
    return load_config(TablesConfig, cfg, "the tables config (conf/make_tables.yaml)")


def preset_grid(tc: TablesConfig) -> dict[str, Any]:
    """Returns the preset's whole grid mapping, schema-checked: with any Hydra overrides of ``grid.*``, its keys
    replaced by those of ``grid_files``."""
    if not isinstance(tc.grid, dict):
        raise ValueError(f"grid must be a mapping (the preset's `grid:` block), got {type(tc.grid).__name__}")
    grid = dict(tc.grid)
    for path in tc.grid_files:
        grid.update((wf.load_yaml(Path(path)) or {}).get("grid") or {})
    wf.validate_config({"experiment": tc.experiment, "grid": grid, "hydra_overrides": {}})
    return grid


def load_study_grid(tc: TablesConfig, found: Found | None = None) -> wf.Grid:
    """Returns the checked grid of the config: the preset's (``preset_grid``), or with ``grid`` null the grid of
    the results ``found`` under the experiment's folder (read when not given); cut to ``blocks`` when set."""
    if tc.grid is None:
        grid = found_grid(found or discover(tc.results_root, tc.experiment), tc.experiment)
    else:
        grid = preset_grid(tc)
    if tc.blocks is not None:
        wf.Grid(tc.experiment, grid)  # the whole grid is checked, then cut
        grid = selected_blocks(grid, tc.blocks)
    return wf.Grid(tc.experiment, grid)


def missing_reason(tc: TablesConfig) -> str:
    """Returns the footnote of a cell without its result file: none was recorded, or (no preset, so every row is
    a leaf that exists) that this benchmark was not run there."""
    return NO_RECORD if tc.grid is not None else not_run(tc.results_root, tc.experiment)


def tables_dir(results_root: str | Path, experiment: str) -> Path:
    """Returns the output directory: ``<results_root>/<experiment>/tables``."""
    return Path(results_root) / experiment / TABLES_DIR


@dataclass(frozen=True)
class Written:
    """One table written in three (or two) formats, for the index and the tracker."""

    stem: str
    title: str
    files: tuple[Path, ...]
    csv: str
    missing: dict[str, int]


def _write_rendered(out: Path, stem: str, title: str, rendered: Rendered) -> Written:
    files = (out / f"{stem}.md", out / f"{stem}.tex", out / f"{stem}.csv")
    for path, text in zip(files, (rendered.markdown, rendered.latex, rendered.csv), strict=True):
        atomic_write_text(path, text)
    return Written(stem, title, files, rendered.csv, rendered.missing)


def _write_side(out: Path, stem: str, title: str, table: SideTable) -> Written:
    files = (out / f"{stem}.md", out / f"{stem}.csv")
    atomic_write_text(files[0], table.markdown(title))
    atomic_write_text(files[1], table.csv())
    missing: dict[str, int] = {}
    for row in table.rows:
        if row[-1]:
            missing[row[-1]] = missing.get(row[-1], 0) + 1
    return Written(stem, title, files, table.csv(), missing)


def study_entries(tc: TablesConfig, grid: wf.Grid) -> dict[wf.Cell, Entry]:
    """Returns every table cell's entry, trained cells pooled over ``train_seeds`` when it is set."""
    entries = collect_results(grid, tc.results_root, tc.score_source)
    if tc.grid is None:
        missing = missing_reason(tc)
        return {cell: missing if entry == NO_RECORD else entry for cell, entry in entries.items()}
    if tc.train_seeds is None:
        return entries
    return pooled_entries(grid, tc.results_root, tc.train_seeds, entries, tc.score_source)


def interval_remark(tc: TablesConfig, grid: wf.Grid, block: wf.Block) -> str:
    """Returns the note under ``block``'s score table saying how its intervals were made ("" when the scores are
    VLMEvalKit's, which the project's scorers cannot resample)."""
    if tc.score_source != "sparsectx":
        return ""
    boot = tc.bootstrap
    seeds = tc.train_seeds or [grid.seed]
    text = (
        f"Intervals: [lo, hi] is the {boot.level * 100:g}% percentile interval of a paired bootstrap over items "
        f"({boot.resamples} resamples, bootstrap.seed={boot.seed}, the scorer's metric recomputed on each)"
    )
    if not has_trained(block):
        return text + ". docs/tables.md"
    if tc.grid is None:
        text += "; trained rows: the checkpoint each leaf evaluated"
    elif len(seeds) > 1:
        text += (
            f"; trained rows pool training seeds {seeds}: mean ± standard deviation over seeds, and their "
            "intervals resample the seeds too"
        )
    else:
        text += f"; trained rows: one training seed ({seeds[0]})"
    return (
        f"{text}. ↑ / ↓: the trained row's difference to the untrained row at its pruner and budget has an "
        f"interval above / below 0 ({block.name}.delta.md). docs/tables.md"
    )


def study_spreads(
    tc: TablesConfig, grid: wf.Grid, entries: Mapping[wf.Cell, Entry]
) -> dict[str, dict[str, BlockSpreads]]:
    """Returns block -> model -> its intervals ({} when the scores are VLMEvalKit's)."""
    if tc.score_source != "sparsectx":
        return {}
    reps: Replicates = cell_replicates(grid, tc.results_root, entries, tc.bootstrap)
    level, labels = tc.bootstrap.level, tc.method_labels
    spreads = {
        block.name: {m: block_spreads(grid, block, m, entries, reps, labels, tc.avg_label, level) for m in block.models}
        for block in grid.blocks
        if block.kind == "table"
    }
    return spreads


def write_tables(tc: TablesConfig, grid: wf.Grid, out: Path) -> tuple[list[Written], list[Figure]]:
    """Returns the tables and figures written to ``out``: block tables (with intervals), differences to the
    untrained rows, recovery, Pass@K, efficiency, plots."""
    entries = study_entries(tc, grid)
    spreads = study_spreads(tc, grid, entries)
    labels, written = tc.method_labels, []
    source = "" if tc.score_source == "sparsectx" else ", VLMEvalKit's evaluate"
    for block in (b for b in grid.blocks if b.kind == "table"):
        mine, remark = spreads.get(block.name, {}), interval_remark(tc, grid, block)
        tables = score_tables(grid, block, entries, labels, tc.avg_label, tc.decimals, mine, remark)
        title = f"{grid.experiment}: {block.name} (scores{source}; {tc.avg_label} = average retain ratio, %)"
        written.append(_write_rendered(out, block.name, title, render(title, tables)))
        if has_trained(block):
            rec = {m: recovery_table(grid, block, m, entries, labels, tc.decimals) for m in block.models}
            title = f"{grid.experiment}: {block.name} (compression-gap recovery{source}, %)"
            written.append(_write_rendered(out, f"{block.name}.recovery", title, render(title, rec)))
        if has_trained(block) and mine:
            deltas = {m: delta_table(grid, block, m, mine[m], labels, remark, tc.avg_label, tc.decimals) for m in mine}
            title = f"{grid.experiment}: {block.name} (trained minus untrained at the same pruner and budget)"
            written.append(_write_rendered(out, f"{block.name}.delta", title, render(title, deltas)))
    figures = retain_plots(grid, entries, labels, out, spreads)
    figures += recovery_plots(grid, entries, labels, out, tc.decimals)  # recovery_vs_budget_<block>_<model>.png|svg
    boot = tc.bootstrap if tc.score_source == "sparsectx" else None
    for sweep in grid.sweeps.values():  # SCOPD Fig. 3: <name>.sweep.md|tex|csv and sweep_<name>_<model>.png|svg
        tables, drawn = sweep_outputs(
            grid, sweep, entries, labels, out, tc.results_root, boot, tc.avg_label, tc.decimals
        )
        title = f"{grid.experiment}: {sweep.name} (sweep of {sweep.label}{source}; {tc.avg_label}: normalised mean, %)"
        written.append(_write_rendered(out, f"{sweep.name}.sweep", title, render(title, tables)))
        figures += drawn
    if has_block(grid, "passk"):
        summary, passk_figures = passk_outputs(
            grid, tc.results_root, labels, out, tc.decimals, tc.bootstrap, missing_reason(tc)
        )
        written.append(_write_side(out, "passk", f"{grid.experiment}: fixed-context Pass@K", summary))
        figures += passk_figures
    if has_block(grid, "efficiency"):
        table = efficiency_table(grid, tc.results_root, labels, tc.decimals, missing_reason(tc))
        title = f"{grid.experiment}: efficiency (% of the unpruned model)"
        written.append(_write_side(out, "efficiency", title, table))
        figures += cost_plots(grid, entries, labels, tc.results_root, out, tc.decimals)  # LT-OPD Fig. 1 right
    for spec in grid.report.values():  # grid.report: SCOPD Table 9, Fig. 7; LT-OPD Fig. 1, Fig. 4; examples
        pages, drawn = report_outputs(grid, spec, entries, tc.results_root, tc.runs_root, labels, out, tc.decimals)
        written += [_write_page(out, page) for page in pages]
        figures += drawn
    return written, figures


def _write_page(out: Path, page: Page) -> Written:
    files = [(out / f"{page.stem}.md", page.markdown), (out / f"{page.stem}.csv", page.csv)]
    files += [(out / f"{page.stem}.tex", page.latex)] if page.latex else []
    for path, text in files:
        atomic_write_text(path, text)
    return Written(page.stem, page.title, tuple(path for path, _ in files), page.csv, page.missing)


class NoResultsError(RuntimeError):
    """A table the grid asks for has no result at all (the results were written under another experiment?)."""


def empty_tables(grid: wf.Grid, entries: Mapping[Any, Any], written: list[Written]) -> list[str]:
    """Returns the tables without a single result: block tables whose cells have no record, and Pass@K or
    efficiency tables whose every row carries a note (no result file)."""
    empty = [
        block.name
        for block in grid.blocks
        if block.kind == "table" and not any(isinstance(entries.get(c), dict) for c in grid.block_cells(block))
    ]
    for item in written:
        if item.stem in ("passk", "efficiency"):
            _, *rows = csv.reader(io.StringIO(item.csv))
            if sum(item.missing.values()) >= len(rows):
                empty.append(item.stem)
    return empty


def check_found(
    tc: TablesConfig, grid: wf.Grid, entries: Mapping[Any, Any], written: list[Written], outside: Sequence[str] = ()
) -> str:
    """Returns the one-line summary of what was found; raises ``NoResultsError`` when a table has no result.

    The error names every empty table, the folder read, the ``blocks`` selection that renders only the others,
    the results there outside the grid (``outside``, the hand runs ``grid=null`` tables) and the experiments
    that do hold results.
    """
    records = sum(1 for entry in entries.values() if isinstance(entry, dict))
    where = Path(tc.results_root) / tc.experiment
    summary = f"make_tables: {records} result files found under {where}/ for {len(entries)} table cells"
    empty = empty_tables(grid, entries, written)
    if empty and not tc.allow_empty:
        others = {k: v for k, v in experiments_with_results(tc.results_root).items() if k != tc.experiment}
        hint = (
            "; results exist under "
            + ", ".join(f"{tc.results_root}/{k}/ ({v} files)" for k, v in others.items())
            + ": evaluate with experiment="
            + tc.experiment
            + " (the grid's runs go there), or "
            if others
            else "; "
        )
        filled = [block.name for block in grid.blocks if block.name not in empty]
        if filled:
            hint = f"; render only the blocks with results: blocks=[{','.join(filled)}]{hint}"
        if outside:
            hint = (
                f"; {len(outside)} {'leaf' if len(outside) == 1 else 'leaves'} outside the grid "
                f"{'holds' if len(outside) == 1 else 'hold'} results under {where}/ (listed above): table everything "
                f"there as found with grid=null{hint}"
            )
        raise NoResultsError(
            f"{summary}; the tables {empty} have no result at all (written anyway, every cell footnoted){hint}"
            f"run the study first: snakemake --profile workflow/profiles/local all_tables --config "
            f"experiment={tc.experiment}. Pass allow_empty=true to render empty tables without an error"
        )
    return summary


def index_markdown(experiment: str, written: list[Written], figures: list[Figure]) -> str:
    """Returns ``README.md``: every table with its files and missing-cell counts, then every figure."""
    lines = [
        f"# Tables of experiment `{experiment}`",
        "",
        "Written by `python src/make_tables.py "
        f"experiment={experiment}`; each missing cell is footnoted in its table with its reason.",
        "",
        "## Tables",
        "",
    ]
    for item in written:
        links = " · ".join(f"[{p.suffix[1:]}]({p.name})" for p in item.files)
        lines.append(f"- **{item.stem}**: {item.title} ({links})")
        lines += [f"  - {count} missing: {reason}" for reason, count in item.missing.items()]
    lines += ["", "## Figures", "", *(figure_notes(figures) or ["- none (the grid asks for no figure)"])]
    return "\n".join(lines) + "\n"


def log_outputs(tracker: Tracker, written: list[Written], figures: list[Figure]) -> None:
    """Logs every table (as a table of its CSV) and every drawn figure (as an image)."""
    for item in written:
        header, *rows = csv.reader(io.StringIO(item.csv))
        tracker.log_table(f"tables/{item.stem}", header, rows)
    for figure in figures:
        if figure.path is not None:
            tracker.log_image(f"plots/{figure.name}", figure.path)


def run(cfg: DictConfig) -> list[Path]:
    """Returns every file written for the experiment of ``cfg`` (tables, plots, then ``README.md``).

    Prints how many result files were found; raises ``NoResultsError`` (after writing) when a table the grid
    asks for has no result at all, unless ``allow_empty=true``.
    """
    tc = load_tables_config(cfg)
    found = discover(tc.results_root, tc.experiment)
    grid = load_study_grid(tc, found)
    outside = [] if tc.grid is None else outside_grid(found, wf.Grid(tc.experiment, preset_grid(tc)))
    notices = [found_line(found), left_out(found)] if tc.grid is None else []
    for line in [*notices, outside_notice(outside, tc.results_root, tc.experiment)]:
        if line:
            print(line)
    if tc.train_seeds is not None:  # seeds that were never trained fail before anything is read or written
        trained = [c for c in grid.cells("table") if c.method != wf.BASE]
        check_trained(grid, tc.results_root, tc.train_seeds, trained)
    out = tables_dir(tc.results_root, tc.experiment)
    resolved: Mapping[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    tracker = start_run(tc.logger, f"{tc.experiment}-tables", tc.experiment, "tables", ["tables"], dict(resolved))
    try:
        written, figures = write_tables(tc, grid, out)
        card = write_protocol_card(tc, out)
        readme = out / "README.md"
        index = index_markdown(tc.experiment, written, figures)
        if card is not None:
            what = "every setting of every job, its source, and where it differs from the paper"
            index += f"\n## Protocol\n\n- [{card.name}]({card.name}): {what}\n"
        atomic_write_text(readme, index)
        log_outputs(tracker, written, figures)
    finally:
        tracker.finish()
    print(
        check_found(tc, grid, collect_results(grid, tc.results_root, tc.score_source), written, outside)
    )  # raises when a table is empty
    drawn = [f.path for f in figures if f.path is not None]
    paths = [p for item in written for p in item.files] + [p for png in drawn for p in (png, caption_path(png))]
    paths += [f.vector for f in figures if f.vector is not None]
    return [*paths, *([card] if card is not None else []), readme]


def write_protocol_card(tc: TablesConfig, out: Path) -> Path | None:
    """Returns the study's protocol card written beside its tables (``protocol.md``), from the preset's whole
    grid (a ``blocks`` selection renders fewer tables, never a partial card); None for a preset of no paper and
    without a preset."""
    if tc.grid is None:
        return None
    card = study_card(tc.experiment, wf.Grid(tc.experiment, dict(tc.grid)))
    if card is None:
        return None
    path = out / CARD_FILE
    atomic_write_text(path, card_markdown(card))
    return path
