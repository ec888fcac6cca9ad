"""The outputs of the grid's ``report:`` entries (``sparsectx.workflow.report_specs``), as pages and figures.

Each entry becomes one or two pages (``<name>.md|.tex|.csv``; the examples page ``<name>.md|.csv`` and its
``<name>_images/``) and its figures (PNG, SVG and caption); ``sparsectx.report.study`` writes the pages.
"""

from __future__ import annotations

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
from sparsectx.workflow.report_specs import ReportSpec

TITLES = {
    "training_cost": "training cost per sample (SCOPD Table 9, upper)",
    "training_cost.tokens": "mean output tokens (SCOPD Table 9, lower)",
    "training_dynamics": "training dynamics in windows of steps (SCOPD Fig. 7)",
    "deviation": "student-teacher divergence in windows of steps (LT-OPD Fig. 1 middle)",
    "flops_retain": "FLOPs against average retain ratio (LT-OPD Fig. 1 right)",
    "token_sensitivity": "per-token KL against visual sensitivity, untrained and trained (SCOPD Fig. 2a, Fig. 6)",
}
"""Kind (and part) -> the page title after ``<experiment>: <name>``."""


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


def report_outputs(
    grid: Grid,
    spec: ReportSpec,
    entries: Mapping[Cell, Entry],
    results_root: str | Path,
    runs_root: str | Path,
    labels: Mapping[str, str],
    out_dir: Path,
    decimals: int,
) -> tuple[list[Page], list[Figure]]:
    """Returns the pages and figures of one ``grid.report`` entry (the figures, and an examples page's images,
    already written to ``out_dir``)."""
    head = f"{grid.experiment}: {spec.name}"
    if spec.kind == "training_cost":
        cost = training_cost_table(grid, spec, runs_root, labels, decimals)
        tokens = output_tokens_table(grid, spec, results_root, labels, decimals)
        return [
            side_page(spec.name, f"{head}, {TITLES['training_cost']}", cost),
            side_page(f"{spec.name}.tokens", f"{head}, {TITLES['training_cost.tokens']}", tokens),
        ], []
    if spec.kind in ("training_dynamics", "deviation"):
        table, figures = dynamics_outputs(grid, spec, runs_root, labels, out_dir, decimals)
        return [side_page(spec.name, f"{head}, {TITLES[spec.kind]}", table)], figures
    if spec.kind == "flops_retain":
        table, figures = flops_retain_outputs(grid, spec, entries, results_root, labels, out_dir, decimals)
        return [side_page(spec.name, f"{head}, {TITLES[spec.kind]}", table)], figures
    if spec.kind == "recovery_figure":
        return [], recovery_figures(grid, spec, entries, labels, out_dir, decimals)
    if spec.kind == "token_sensitivity":
        table, figures = token_sensitivity_outputs(grid, spec, runs_root, labels, out_dir, decimals)
        return [side_page(spec.name, f"{head}, {TITLES[spec.kind]}", table)], figures
    page = examples_page(grid, spec, results_root, labels, out_dir)
    return [Page(spec.name, f"{head}, qualitative examples", page.markdown, page.csv)], []
