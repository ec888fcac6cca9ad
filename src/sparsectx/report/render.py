"""Render a ``Table`` (``sparsectx.report.tables``) as Markdown, LaTeX (booktabs) or CSV.

Marks (bold best, underlined second) and footnotes are already decided by ``build_table``; these functions
only spell them in each format.
"""

from __future__ import annotations

import csv
import io

from sparsectx.report.tables import MISSING, Cell, Table, budget_label


def _cell_md(cell: Cell) -> str:
    if cell.value is None:
        return f"{MISSING}<sup>{cell.note}</sup>"
    text = {"best": f"**{cell.text}**", "second": f"<u>{cell.text}</u>"}.get(cell.mark, cell.text)
    return text if cell.note is None else f"{text}<sup>{cell.note}</sup>"


def to_markdown(table: Table) -> str:
    """Returns the table as GitHub Markdown: bold best, ``<u>`` second, numbered notes after it."""

    def esc(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [
        "| " + " | ".join(["Method", "Pruner", *map(esc, table.columns)]) + " |",
        "|" + "|".join([":--", ":--"] + ["--:"] * len(table.columns)) + "|",
    ]
    for block in table.blocks:
        lines.append(f"| *{budget_label(block.budget)}* |" + " |" * (len(table.columns) + 1))
        for row in block.rows:
            lines.append(
                "| " + " | ".join([esc(row.method), esc(row.pruner), *map(_cell_md, row.cells)]) + " |"
            )
    numbered = list(enumerate(table.notes, start=1))
    for heading, shown in (
        ("Missing cells:", [(i, note) for i, note in numbered if i not in table.caveats]),
        ("Scores with caveats:", [(i, note) for i, note in numbered if i in table.caveats]),
    ):
        if shown:
            lines += ["", heading, ""]
        for i, (reason, where) in shown:
            lines.append(f"- <sup>{i}</sup> {esc(reason)}: {'; '.join(map(esc, where))}.")
    return "\n".join(lines) + "\n"


_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_"}
_TEX_SPECIAL |= {"{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def tex_escape(text: str) -> str:
    """Returns ``text`` with LaTeX's special characters escaped."""
    return "".join(_TEX_SPECIAL.get(ch, ch) for ch in text)


def _cell_tex(cell: Cell) -> str:
    if cell.value is None:
        return f"---\\textsuperscript{{{cell.note}}}"
    text = {"best": f"\\textbf{{{cell.text}}}", "second": f"\\underline{{{cell.text}}}"}.get(
        cell.mark, cell.text
    )
    return text if cell.note is None else f"{text}\\textsuperscript{{{cell.note}}}"


def to_latex(table: Table) -> str:
    """Returns a booktabs ``tabular`` (needs ``\\usepackage{booktabs}``) followed by the footnotes."""
    width = len(table.columns) + 2
    lines = [
        f"\\begin{{tabular}}{{ll{'r' * len(table.columns)}}}",
        "\\toprule",
        " & ".join(["Method", "Pruner", *map(tex_escape, table.columns)]) + " \\\\",
    ]
    for block in table.blocks:
        lines += [
            "\\midrule",
            f"\\multicolumn{{{width}}}{{c}}{{\\textit{{{tex_escape(budget_label(block.budget))}}}}} \\\\",
        ]
        lines.append("\\midrule")
        for row in block.rows:
            lines.append(
                " & ".join([tex_escape(row.method), tex_escape(row.pruner), *map(_cell_tex, row.cells)])
                + " \\\\"
            )
    lines += ["\\bottomrule", "\\end{tabular}"]
    if table.notes:
        lines.append("\\par\\smallskip{\\footnotesize")
        for i, (reason, where) in enumerate(table.notes, start=1):
            lines.append(
                f"\\textsuperscript{{{i}}} {tex_escape(reason)}: {tex_escape('; '.join(where))}.\\\\"
            )
        lines.append("}")
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    """Returns the table as CSV, one line per row, with ``best``/``second`` columns and missing-cell notes.

    Columns: ``budget`` (fraction), ``method``, ``pruner``, the table columns (displayed text, "—" if
    missing), ``best`` and ``second`` (``;``-joined column names where this row holds that mark) and
    ``notes`` (``column: reason`` for each footnoted cell: missing, or scored with a caveat).
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["budget", "method", "pruner", *table.columns, "best", "second", "notes"])
    for block in table.blocks:
        for row in block.rows:
            pairs = list(zip(table.columns, row.cells, strict=True))
            writer.writerow([
                f"{block.budget:g}",
                row.method,
                row.pruner,
                *(cell.text for cell in row.cells),
                ";".join(col for col, cell in pairs if cell.mark == "best"),
                ";".join(col for col, cell in pairs if cell.mark == "second"),
                "; ".join(f"{col}: {table.notes[cell.note - 1][0]}" for col, cell in pairs if cell.note),
            ])  # fmt: skip
    return out.getvalue()
