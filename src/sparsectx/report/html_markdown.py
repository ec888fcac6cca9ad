"""The Markdown that ``make_tables`` writes, as HTML for the study report (``sparsectx.report.html_report``).

A subset, not CommonMark: headings (``#``), GitHub pipe tables with their alignment row, bullet lists (nested by
two spaces), paragraphs, and inline ``**bold**``, ``*italic*``, `` `code` `` and images ``![alt](file)``. It is the
Markdown ``sparsectx.report.render.to_markdown``, the side tables, the plot captions, the examples page and the
protocol card (``sparsectx.protocol.card``) produce. Every character is escaped except the two tags those writers
emit on purpose, ``<u>`` (second best) and ``<sup>`` (footnote numbers): the tables also quote text such as
``<think></think>``, which a Markdown library passing raw HTML through would turn into elements.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

Images = Callable[[str], str | None]
"""A Markdown image's file name -> the ``src`` to show it with (a data URI), or None when it cannot be had."""

KEPT_TAGS = re.compile(r"&lt;(/?)(u|sup)&gt;")
"""The escaped forms of the tags the writers emit on purpose, turned back into tags."""
CODE = re.compile(r"`([^`]+)`")
BOLD = re.compile(r"\*\*(.+?)\*\*")
ITALIC = re.compile(r"(?<![\w*])\*(?![\s*])(.+?)(?<![\s*])\*(?![\w*])")
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
HEADING = re.compile(r"(#{1,6}) (.*)")
BULLET = re.compile(r"( *)- (.*)")
CELL_SPLIT = re.compile(r"(?<!\\)\|")


def inline_html(text: str, images: Images | None = None) -> str:
    """Returns one line of Markdown as HTML: escaped, then ``<u>``/``<sup>`` restored and the inline marks drawn.

    Code spans are kept verbatim (no marks inside). An image whose file ``images`` cannot supply shows its alt
    text and file name instead.
    """
    parts = CODE.split(text)  # odd positions are code spans
    out = []
    for index, part in enumerate(parts):
        escaped = html.escape(part, quote=True)
        if index % 2:
            out.append(f"<code>{escaped}</code>")
            continue
        escaped = KEPT_TAGS.sub(r"<\1\2>", escaped)
        escaped = IMAGE.sub(lambda m: _image(m[1], m[2], images), escaped)
        escaped = BOLD.sub(r"<strong>\1</strong>", escaped)
        out.append(ITALIC.sub(r"<em>\1</em>", escaped))
    return "".join(out)


def _image(alt: str, name: str, images: Images | None) -> str:
    src = images(html.unescape(name)) if images is not None else None
    if src is None:
        return f"[{alt}: {name}]"
    return f'<img src="{html.escape(src, quote=True)}" alt="{alt}">'


def _cells(line: str) -> list[str]:
    """Returns the cells of one pipe-table line (``\\|`` is a literal bar inside a cell)."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [cell.strip().replace("\\|", "|") for cell in CELL_SPLIT.split(inner)]


def _table(lines: list[str], images: Images | None) -> str:
    """Returns a pipe table (header, alignment row, body) as an HTML table; ``--:`` columns get class ``num``, and a
    body row with only its first cell filled spans the table."""
    header, aligns, *body = (_cells(line) for line in lines)
    numeric = [align.endswith(":") and not align.startswith(":") for align in aligns]

    def row(cells: list[str], tag: str) -> str:
        if tag == "td" and len(numeric) > 1 and not any(cells[1:]):  # a heading row (a budget block's): one cell
            return f'<tr><td colspan="{len(numeric)}">{inline_html(cells[0], images)}</td></tr>'
        padded = cells + [""] * (len(numeric) - len(cells))
        shown = []
        for cell, num in zip(padded, numeric, strict=False):
            attr = ' class="num"' if num else ""
            shown.append(f"<{tag}{attr}>{inline_html(cell, images)}</{tag}>")
        return "<tr>" + "".join(shown) + "</tr>"

    rows = "".join(row(cells, "td") for cells in body)
    return f"<table><thead>{row(header, 'th')}</thead><tbody>{rows}</tbody></table>"


def _list(lines: list[str], images: Images | None) -> str:
    """Returns bullet lines (two spaces of indent per level) as nested ``<ul>`` lists."""
    out, depth = [], -1
    for line in lines:
        match = BULLET.fullmatch(line)
        if match is None:  # a continuation line of the item above
            out[-1] = out[-1].removesuffix("</li>") + " " + inline_html(line.strip(), images) + "</li>"
            continue
        level = len(match[1]) // 2
        while depth < level:
            out.append("<ul>")
            depth += 1
        while depth > level:
            out.append("</ul>")
            depth -= 1
        out.append(f"<li>{inline_html(match[2], images)}</li>")
    return "".join(out) + "</ul>" * (depth + 1)


def markdown_html(text: str, images: Images | None = None, shift: int = 0) -> str:
    """Returns ``text`` (the Markdown subset of this module's docstring) as an HTML fragment.

    ``images`` supplies the ``src`` of each image the Markdown names (``![alt](file)``); ``shift`` lowers every
    heading by that many levels (at most to ``<h6>``), for Markdown shown inside a page's own sections.
    """
    blocks: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.strip():
            index += 1
            continue
        heading = HEADING.fullmatch(line)
        if heading:
            level = min(len(heading[1]) + shift, 6)
            blocks.append(f"<h{level}>{inline_html(heading[2], images)}</h{level}>")
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() and not HEADING.fullmatch(lines[end]):
            end += 1  # a block runs to the next blank line or heading
        block = lines[index:end]
        if line.lstrip().startswith("|") and len(block) >= 2:
            blocks.append(_table(block, images))
        elif BULLET.fullmatch(line):
            blocks.append(_list(block, images))
        else:
            blocks.append(f"<p>{' '.join(inline_html(part.strip(), images) for part in block)}</p>")
        index = end
    return "\n".join(blocks)
