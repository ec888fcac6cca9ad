"""Result tables (Markdown, LaTeX, CSV) and PNG plots built from result records."""

from sparsectx.report.plots import plot_pass_at_k, plot_retain_vs_budget, retain_series
from sparsectx.report.render import to_csv, to_latex, to_markdown
from sparsectx.report.tables import (
    Block,
    Cell,
    ResultRecord,
    Row,
    Table,
    build_table,
    check_versions,
    to_records,
)

__all__ = [
    "Block",
    "Cell",
    "ResultRecord",
    "Row",
    "Table",
    "build_table",
    "check_versions",
    "plot_pass_at_k",
    "plot_retain_vs_budget",
    "retain_series",
    "to_csv",
    "to_latex",
    "to_markdown",
    "to_records",
]
