"""Render a ``Table`` (``sparsectx.report.tables``) as Markdown, LaTeX (booktabs) or CSV.

Marks (bold best, underlined second) and footnotes are already decided by ``build_table``; these functions
only spell them in each format. A cell with a spread (``Spread``) shows it after its value, in every format:
``45.00 [41.20, 48.80]`` (the 95% interval), ``45.00 ± 1.20 [41.20, 48.80]`` for a row pooled over training
seeds (± their standard deviation), and an arrow (↑ / ↓; LaTeX: uparrow / downarrow in math mode) where a
trained row's difference to the untrained row at the same pruner and budget has an interval above / below 0.
The CSV keeps each column's value alone and adds ``<column> lo``, ``<column> hi`` and ``<column> std``
columns and ``above_untrained`` / ``below_untrained`` (the columns with an arrow) when a cell has a spread.
"""

from __future__ import annotations

import csv
import io

from sparsectx.report.tables import MISSING, Cell, Spread, Table, budget_label

ARROWS = {"up": "↑", "down": "↓"}
TEX_ARROWS = {"up": "$\\uparrow$", "down": "$\\downarrow$"}


def spread_text(spread: Spread | None, decimals: int, arrows: dict[str, str] = ARROWS, pm: str = "±") -> str:
    """Returns what follows a value with ``spread``: " ± std [lo, hi] ↑" (parts present only when known)."""
    if spread is None:
        return ""
    std = "" if spread.std is None else f" {pm} {spread.std:.{decimals}f}"
    arrow = f" {arrows[spread.shift]}" if spread.shift else ""
    return f"{std} [{spread.lo:.{decimals}f}, {spread.hi:.{decimals}f}]{arrow}"


def _cell_md(cell: Cell, decimals: int) -> str:
    if cell.value is None:
        return f"{MISSING}<sup>{cell.note}</sup>"
    text = {"best": f"**{cell.text}**", "second": f"<u>{cell.text}</u>"}.get(cell.mark, cell.text)
    text = text if cell.note is None else f"{text}<sup>{cell.note}</sup>"
    return text + spread_text(cell.spread, decimals)


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
                "| "
                + " | ".join([esc(row.method), esc(row.pruner), *(_cell_md(c, table.decimals) for c in row.cells)])
                + " |"
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
    if table.remarks:
        lines += ["", *(f"- {esc(remark)}" for remark in table.remarks)]
    return "\n".join(lines) + "\n"


_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_"}
_TEX_SPECIAL |= {"{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_TEX_SPECIAL |= {"±": r"$\pm$", "↑": r"$\uparrow$", "↓": r"$\downarrow$"}


def tex_escape(text: str) -> str:
    """Returns ``text`` with LaTeX's special characters escaped."""
    return "".join(_TEX_SPECIAL.get(ch, ch) for ch in text)


def _cell_tex(cell: Cell, decimals: int) -> str:
    if cell.value is None:
        return f"---\\textsuperscript{{{cell.note}}}"
    text = {"best": f"\\textbf{{{cell.text}}}", "second": f"\\underline{{{cell.text}}}"}.get(cell.mark, cell.text)
    text = text if cell.note is None else f"{text}\\textsuperscript{{{cell.note}}}"
    spread = spread_text(cell.spread, decimals, TEX_ARROWS, "$\\pm$")
    return text + (f" {{\\scriptsize{spread}}}" if spread else "")


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
                " & ".join(
                    [
                        tex_escape(row.method),
                        tex_escape(row.pruner),
                        *(_cell_tex(c, table.decimals) for c in row.cells),
                    ]
                )
                + " \\\\"
            )
    lines += ["\\bottomrule", "\\end{tabular}"]
    if table.notes:
        lines.append("\\par\\smallskip{\\footnotesize")
        for i, (reason, where) in enumerate(table.notes, start=1):
            lines.append(f"\\textsuperscript{{{i}}} {tex_escape(reason)}: {tex_escape('; '.join(where))}.\\\\")
        lines.append("}")
    if table.remarks:
        lines.append("\\par{\\footnotesize " + " ".join(tex_escape(r) for r in table.remarks) + "}")
    return "\n".join(lines) + "\n"


def csv_cell(value: object) -> object:
    """Returns ``value`` with its carriage returns as line feeds when it is text: ``csv.writer`` with the
    ``"\n"`` line terminator quotes a cell holding ``"\n"`` but not one holding a bare ``"\r"``, which every
    CSV reader then takes for the end of the row (a model's response, a benchmark question with Windows
    line ends)."""
    return value.replace("\r\n", "\n").replace("\r", "\n") if isinstance(value, str) else value


def to_csv(table: Table) -> str:
    """Returns the table as CSV, one line per row, with ``best``/``second`` columns and missing-cell notes.

    Columns: ``budget`` (fraction), ``method``, ``pruner``, the table columns (displayed value, "—" if
    missing), ``best`` and ``second`` (``;``-joined column names where this row holds that mark) and
    ``notes`` (``column: reason`` for each footnoted cell: missing, or scored with a caveat). When a cell has a
    spread: ``<column> lo``, ``<column> hi`` (its interval), ``<column> std`` (over training seeds) for every
    column, and ``above_untrained`` / ``below_untrained`` (``;``-joined columns whose difference to the
    untrained row has an interval above / below 0); "" where a cell has no such value.
    """
    spread = any(cell.spread is not None for block in table.blocks for row in block.rows for cell in row.cells)
    extra = [f"{col} {part}" for part in ("lo", "hi", "std") for col in table.columns] if spread else []
    extra += ["above_untrained", "below_untrained"] if spread else []
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["budget", "method", "pruner", *table.columns, "best", "second", "notes", *extra])
    digits = table.decimals
    for block in table.blocks:
        for row in block.rows:
            pairs = list(zip(table.columns, row.cells, strict=True))
            spreads = [cell.spread for cell in row.cells]
            bounds = (
                [
                    "" if s is None or value is None else f"{value:.{digits}f}"
                    for part in ("lo", "hi", "std")
                    for s in spreads
                    for value in [None if s is None else getattr(s, part)]
                ]
                if spread
                else []
            )
            shifts = (
                [
                    ";".join(col for col, s in zip(table.columns, spreads, strict=True) if s and s.shift == way)
                    for way in ("up", "down")
                ]
                if spread
                else []
            )
            writer.writerow(
                [
                    f"{block.budget:g}",
                    row.method,
                    row.pruner,
                    *(cell.text for cell in row.cells),
                    ";".join(col for col, cell in pairs if cell.mark == "best"),
                    ";".join(col for col, cell in pairs if cell.mark == "second"),
                    "; ".join(f"{col}: {table.notes[cell.note - 1][0]}" for col, cell in pairs if cell.note),
                    *bounds,
                    *shifts,
                ]
            )
    return out.getvalue()
