"""The outputs of the grid's ``report:`` entries (``sparsectx.workflow.report_specs``), as pages and figures.

Each entry becomes one or two pages (``<name>.md|.tex|.csv``; the examples page ``<name>.md|.csv`` and its
``<name>_images/``) and its figures (PNG, SVG and caption); ``sparsectx.report.study`` writes the pages. Each
kind's renderer is named by its ``ReportKind`` record (``REPORT_KINDS``) and takes one ``ReportInputs``; those
of the shipped kinds are below.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sparsectx.report.analyses import Figure, SideTable
from sparsectx.report.collect import Entry
from sparsectx.report.examples import examples_page
from sparsectx.report.paper_figures import flops_retain_outputs, recovery_figures
from sparsectx.report.render import tex_escape
from sparsectx.report.token_sensitivity import token_sensitivity_outputs
from sparsectx.report.training_report import dynamics_outputs, output_tokens_table, training_cost_table
from sparsectx.workflow import Cell, Grid
from sparsectx.workflow.report_specs import REPORT_KINDS, ReportSpec

TOKENS_TITLE = "mean output tokens (SCOPD Table 9, lower)"
"""The title of ``training_cost``'s second page (``<name>.tokens``)."""


@dataclass(frozen=True)
class Page:
    """One page to write: ``<stem>.md``, ``<stem>.tex`` (when ``latex``) and ``<stem>.csv``."""

    stem: str
    title: str
    markdown: str
    csv: str
    latex: str = ""
    missing: dict[str, int] = field(default_factory=dict)
    """Reason -> rows without a value (the index lists them)."""


def side_latex(title: str, table: SideTable) -> str:
    """Returns ``table`` as a LaTeX ``tabular`` (booktabs) under a ``% title`` comment, its footnote after it."""
    columns = table.columns[:-1]  # the note column stays in the Markdown and the CSV
    lines = [f"% {title}", "\\begin{tabular}{" + "l" * 4 + "r" * (len(columns) - 4) + "}", "\\toprule"]
    lines.append(" & ".join(tex_escape(c) for c in columns) + " \\\\")
    lines.append("\\midrule")
    lines += [" & ".join(tex_escape(c) for c in row[:-1]) + " \\\\" for row in table.rows]
    lines += ["\\bottomrule", "\\end{tabular}"]
    if table.footnote:
        lines.append(f"% {table.footnote}")
    return "\n".join(lines) + "\n"


def side_page(stem: str, title: str, table: SideTable) -> Page:
    """Returns the page of a flat table: Markdown, LaTeX and CSV, and its rows' notes counted."""
    missing: dict[str, int] = {}
    for row in table.rows:
        if row[-1]:
            missing[row[-1]] = missing.get(row[-1], 0) + 1
    return Page(stem, title, table.markdown(title), table.csv(), side_latex(title, table), missing)


@dataclass(frozen=True)
class ReportInputs:
    """What a report kind's renderer reads: the entry, the grid, its collected results and where files go."""

    grid: Grid
    spec: ReportSpec
    entries: Mapping[Cell, Entry]
    """Cell -> its record fields, or the reason it has no score (``sparsectx.report.collect``)."""
    results_root: str | Path
    runs_root: str | Path
    labels: Mapping[str, str]
    """Method key -> its displayed name (``method_labels``)."""
    out_dir: Path
    """The tables folder: figures and images are written here; the pages are returned."""
    decimals: int

    @property
    def head(self) -> str:
        """Returns ``<experiment>: <name>``, the start of every title of the entry."""
        return f"{self.grid.experiment}: {self.spec.name}"

    @property
    def title(self) -> str:
        """Returns ``<experiment>: <name>, <the kind's title>``."""
        return f"{self.head}, {REPORT_KINDS.get(self.spec.kind).title}"


Rendered = tuple[list[Page], list[Figure]]
"""A renderer's pages (written by ``sparsectx.report.study``) and figures (already written)."""


def training_cost_pages(inputs: ReportInputs) -> Rendered:
    """Returns ``training_cost``'s two pages: time and memory per training run, and mean output tokens."""
    grid, spec = inputs.grid, inputs.spec
    cost = training_cost_table(grid, spec, inputs.runs_root, inputs.labels, inputs.decimals)
    tokens = output_tokens_table(grid, spec, inputs.results_root, inputs.labels, inputs.decimals)
    return [
        side_page(spec.name, inputs.title, cost),
        side_page(f"{spec.name}.tokens", f"{inputs.head}, {TOKENS_TITLE}", tokens),
    ], []


def dynamics_pages(inputs: ReportInputs) -> Rendered:
    """Returns the page and figures of ``training_dynamics`` or ``deviation``: per-step logs in windows."""
    table, figures = dynamics_outputs(
        inputs.grid, inputs.spec, inputs.runs_root, inputs.labels, inputs.out_dir, inputs.decimals
    )
    return [side_page(inputs.spec.name, inputs.title, table)], figures


def flops_retain_pages(inputs: ReportInputs) -> Rendered:
    """Returns ``flops_retain``'s page and figures: FLOPs ratio against average retain ratio."""
    table, figures = flops_retain_outputs(
        inputs.grid,
        inputs.spec,
        inputs.entries,
        inputs.results_root,
        inputs.labels,
        inputs.out_dir,
        inputs.decimals,
    )
    return [side_page(inputs.spec.name, inputs.title, table)], figures


def recovery_figure_pages(inputs: ReportInputs) -> Rendered:
    """Returns ``recovery_figure``'s figures (no page: its numbers are the block's recovery table)."""
    return [], recovery_figures(
        inputs.grid, inputs.spec, inputs.entries, inputs.labels, inputs.out_dir, inputs.decimals
    )


def token_sensitivity_pages(inputs: ReportInputs) -> Rendered:
    """Returns ``token_sensitivity``'s page and strip and scatter figures."""
    table, figures = token_sensitivity_outputs(
        inputs.grid, inputs.spec, inputs.runs_root, inputs.labels, inputs.out_dir, inputs.decimals
    )
    return [side_page(inputs.spec.name, inputs.title, table)], figures


def examples_pages(inputs: ReportInputs) -> Rendered:
    """Returns the ``examples`` page (its images already written)."""
    page = examples_page(inputs.grid, inputs.spec, inputs.results_root, inputs.labels, inputs.out_dir)
    return [Page(inputs.spec.name, inputs.title, page.markdown, page.csv)], []


def report_outputs(
    grid: Grid,
    spec: ReportSpec,
    entries: Mapping[Cell, Entry],
    results_root: str | Path,
    runs_root: str | Path,
    labels: Mapping[str, str],
    out_dir: Path,
    decimals: int,
) -> Rendered:
    """Returns the pages and figures of one ``grid.report`` entry (the figures, and an examples page's images,
    already written to ``out_dir``), from the renderer its kind's record names."""
    module, function = REPORT_KINDS.get(spec.kind).render.split(":")
    render = getattr(importlib.import_module(module), function)
    return render(ReportInputs(grid, spec, entries, results_root, runs_root, labels, out_dir, decimals))
