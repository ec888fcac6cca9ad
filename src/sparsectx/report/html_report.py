"""``make_html_report.py``: one study as a single static HTML file that any browser opens, with no server and no
network (issue 42, item 8).

The page shows, from ``<results_root>/<experiment>/``:

- the protocol card ``make_tables`` wrote beside the tables (``tables/protocol.md``, ``sparsectx.protocol``),
  or why the study has none;
- every table ``make_tables`` wrote, in the order of its index (``tables/README.md``), from its Markdown;
- every plot it drew (the SVG where there is one, else the PNG) with its caption, and the plots not drawn with
  the reason;
- an item browser (``sparsectx.report.html_items``): per model and benchmark, items with their image, question,
  options and reference, and every evaluated row's answer, correctness and output, filtered by model,
  benchmark and method in the page; the URL fragment ``#bench=<b>&method=<m>`` sets the filters.

Images and plots are inlined as data URIs, the style sheet and script (``sparsectx/assets/html_report/``) as
elements, so the one file is the whole report. At most ``items_per_benchmark`` items per model and benchmark are
inlined, and the page says so. A study with no results, or whose tables were not written yet, is refused before
anything is written, naming the command to run first.

Schema of ``conf/make_html_report.yaml``: ``HtmlReportConfig`` (struct mode; no defaults in code).
"""

from __future__ import annotations

import base64
import difflib
import html
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from sparsectx.config_schema import load_config
from sparsectx.io import atomic_write_text
from sparsectx.paths import budget_tag, path_name
from sparsectx.protocol.record import protocols
from sparsectx.protocol.study import CARD_FILE
from sparsectx.report.discover import Found, discover, experiments_with_results
from sparsectx.report.html_items import BenchItems, BrowsedItem, browse
from sparsectx.report.html_markdown import Images, markdown_html
from sparsectx.report.study import tables_dir
from sparsectx.workflow import CONF_DIR, load_yaml

ASSETS_DIR = Path(__file__).resolve().parents[1] / "assets" / "html_report"
"""The page's style sheet and script (shipped with the package: ``assets/**`` is its package data)."""
INDEX = "README.md"
"""The index ``make_tables`` writes last (``sparsectx.report.study.index_markdown``): its tables and figures."""
TABLE_LINE = re.compile(r"- \*\*(?P<stem>.+?)\*\*: (?P<title>.*) \(\[md\]\(")
"""An index line of a table: ``- **<stem>**: <title> ([md](<stem>.md) · ...)``."""
DRAWN_LINE = re.compile(r"- \[(?P<name>.+?)\.png\]\(")
"""An index line of a drawn figure (``sparsectx.report.analyses.figure_notes``)."""
UNDRAWN_LINE = re.compile(r"- (?P<name>\S+): not drawn \((?P<note>.*)\)")
"""An index line of a figure that was not drawn, with the reason."""
MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}


@dataclass
class HtmlReportConfig:
    """The whole ``make_html_report.py`` job (``conf/make_html_report.yaml``)."""

    experiment: str
    """The study: ``<results_root>/<experiment>/`` holds its results and the tables ``make_tables`` wrote."""
    grid: Any
    """Set by a preset; not read: the report shows the results found under the name, as written."""
    results_root: str
    out: str
    """The report file written (atomically; its folder is created)."""
    items_per_benchmark: int
    """Items inlined per model and benchmark, evenly spaced over the benchmark file (the page says how many)."""
    output_chars: int
    """Characters of each model output inlined (the whole output is in the leaf's predictions file)."""

    def __post_init__(self) -> None:
        path_name(self.experiment, "experiment")  # it names the folder read
        for key in ("items_per_benchmark", "output_chars"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}={getattr(self, key)} must be >= 1 (conf/make_html_report.yaml)")
        if not self.out.endswith(".html"):
            raise ValueError(f"out={self.out} must name an .html file, e.g. out={self.results_root}/report.html")
        check_inputs(self.results_root, self.experiment)


def load_html_report_config(cfg: DictConfig) -> HtmlReportConfig:
    """Returns the composed config as a checked ``HtmlReportConfig``; unknown, missing or mistyped keys raise, and
    so does a study without results or tables (``check_inputs``); all at once."""
    return load_config(HtmlReportConfig, cfg, "the HTML report config (conf/make_html_report.yaml)")


def check_inputs(results_root: str, experiment: str) -> None:
    """Returns None when ``<results_root>/<experiment>/`` holds results and the tables' index; raises
    ``ValueError`` naming the command to run first otherwise (nothing has been written then)."""
    folder = Path(results_root) / experiment
    if discover(results_root, experiment).empty:
        others = {k: v for k, v in experiments_with_results(results_root).items() if k != experiment}
        close = difflib.get_close_matches(experiment, others, n=1)
        held = ", ".join(f"{results_root}/{k}/ ({v} files)" for k, v in others.items())
        raise ValueError(
            f"no results under {folder}/: run the study first: snakemake --profile workflow/profiles/local "
            f"all_tables --config experiment={experiment} (it writes the tables too), or evaluate by hand under "
            f"that name (python src/evaluate.py experiment={experiment} ...) and table it (python src/make_tables.py "
            f"experiment={experiment})"
            + (f"; did you mean experiment={close[0]}?" if close else "")
            + (f"; results exist under {held}" if others else "")
        )
    if not (tables_dir(results_root, experiment) / INDEX).is_file():
        raise ValueError(
            f"{tables_dir(results_root, experiment) / INDEX} is missing: the report shows the tables and plots "
            f"make_tables writes, so run python src/make_tables.py experiment={experiment} "
            f"results_root={results_root} first"
        )


def data_uri(path: Path) -> str:
    """Returns the file at ``path`` as a base64 data URI (RFC 2397), its media type from its suffix (PNG, SVG or
    JPEG): browsers show such a URI in ``<img src>`` as they would the file."""
    return f"data:{MIME[path.suffix.lower()]};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def file_images(folder: Path) -> Images:
    """Returns the image lookup of ``markdown_html`` for Markdown in ``folder``: a file there (or below) as a data
    URI, None when it is missing or of another kind."""

    def image(name: str) -> str | None:
        path = (folder / name).resolve()
        inside = folder.resolve() in path.parents
        return data_uri(path) if inside and path.is_file() and path.suffix.lower() in MIME else None

    return image


def split_title(markdown: str) -> tuple[str, str]:
    """Returns the Markdown's leading ``# title`` line (without the marks; "" when none) and the rest."""
    first, _, rest = markdown.partition("\n")
    return (first[2:], rest) if first.startswith("# ") else ("", markdown)


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def protocol_section(tables: Path, experiment: str) -> str:
    """Returns the protocol card's section: the card ``make_tables`` wrote, or why the study has none."""
    path = tables / CARD_FILE
    if not path.is_file():
        claimed = ", ".join(sorted(e for p in protocols() for e in p.experiments))
        why = (
            f"No protocol card: no paper record (conf/protocol/) claims experiment {experiment}. make_tables writes "
            f"one beside the tables of {claimed}; python -m sparsectx.protocol experiment=<preset> prints it."
        )
        return f'<section id="protocol"><h2>Protocol card</h2><p class="notice">{_esc(why)}</p></section>'
    title, rest = split_title(path.read_text(encoding="utf-8"))
    body = markdown_html(rest, shift=2)
    return (
        f'<section id="protocol"><h2>Protocol card</h2><details><summary>{_esc(title)}</summary>'
        f'<div class="scroll">{body}</div></details></section>'
    )


def index_entries(tables: Path) -> tuple[list[tuple[str, str]], list[str], list[tuple[str, str]]]:
    """Returns what the tables' index lists, in its order: (stem, title) of each table, the name of each drawn
    figure, and (name, reason) of each figure not drawn."""
    listed, drawn, undrawn = [], [], []
    for line in (tables / INDEX).read_text(encoding="utf-8").splitlines():
        if match := TABLE_LINE.match(line):
            listed.append((match["stem"], match["title"]))
        elif match := DRAWN_LINE.match(line):
            drawn.append(match["name"])
        elif match := UNDRAWN_LINE.fullmatch(line):
            undrawn.append((match["name"], match["note"]))
    return listed, drawn, undrawn


def tables_section(tables: Path, listed: list[tuple[str, str]]) -> str:
    """Returns every listed table rendered from its Markdown (images inlined), each folded under its title but the
    first (``#table-<stem>`` in the URL opens one)."""
    parts = ['<section id="tables"><h2>Tables</h2>']
    for index, (stem, title) in enumerate(listed):
        _, rest = split_title((tables / f"{stem}.md").read_text(encoding="utf-8"))
        body = markdown_html(rest, file_images(tables), shift=2)
        parts.append(
            f'<section id="table-{_esc(stem)}" class="table"><details{" open" if index == 0 else ""}>'
            f'<summary>{_esc(title)}</summary><div class="scroll">{body}</div></details></section>'
        )
    return "".join(parts) + "</section>"


def plots_section(tables: Path, drawn: list[str], undrawn: list[tuple[str, str]]) -> str:
    """Returns every drawn plot (its SVG, else its PNG) with its caption, then the plots not drawn and why."""
    parts = ['<section id="plots"><h2>Plots</h2><div class="figures">']
    for name in drawn:
        vector = tables / f"{name}.svg"
        image = vector if vector.is_file() else tables / f"{name}.png"
        title, rest = split_title((tables / f"{name}.caption.md").read_text(encoding="utf-8"))
        parts.append(
            f'<figure id="plot-{_esc(name)}"><img src="{data_uri(image)}" alt="{_esc(title or name)}">'
            f"<figcaption><strong>{_esc(title)}</strong>{markdown_html(rest, shift=3)}</figcaption></figure>"
        )
    parts.append("</div>")
    if undrawn:
        listed = "".join(f"<li><code>{_esc(name)}</code>: {_esc(note)}</li>" for name, note in undrawn)
        parts.append(f"<h3>Not drawn</h3><ul>{listed}</ul>")
    if not drawn and not undrawn:
        parts.append('<p class="notice">The study asks for no plot.</p>')
    return "".join(parts) + "</section>"


def _answer_row(item: BrowsedItem) -> str:
    rows = []
    for answer in item.answers:
        mark = {True: "✓", False: "✗", None: "?"}[answer.correct]
        verdict = {True: "true", False: "false", None: "unknown"}[answer.correct]
        rows.append(
            f'<tr class="output" data-method="{_esc(answer.method)}" data-budget="{budget_tag(answer.budget)}">'
            f'<td>{_esc(answer.label)}</td><td>{_esc(answer.pruner)}</td><td class="num">{answer.budget * 100:g}%</td>'
            f'<td class="answer">{_esc(answer.answer)}</td><td class="mark" data-correct="{verdict}">{mark}</td>'
            f'<td class="response">{_esc(answer.output)}</td></tr>'
        )
    return "".join(rows)


def item_html(item: BrowsedItem) -> str:
    """Returns one item of the browser: its picture, question, options, reference and every row's answer."""
    picture = (
        f'<img src="{item.image}" alt="item {_esc(item.item_id)} of {_esc(item.bench)}">'
        if item.image is not None
        else '<span class="none">no image</span>'
    )
    options = "; ".join(f"{letter}. {text}" for letter, text in item.options.items())
    head = "<tr><th>Method</th><th>Pruner</th><th>Budget</th><th>Answer</th><th>Correct</th><th>Output</th></tr>"
    return (
        f'<article class="item" data-model="{_esc(item.model)}" data-bench="{_esc(item.bench)}" '
        f'data-id="{_esc(item.item_id)}"><div class="picture">{picture}</div><div class="body">'
        f"<h3>{_esc(item.bench)} · item {_esc(item.item_id)} <small>({_esc(item.model)})</small></h3>"
        f'<p class="question">{_esc(item.question)}</p>'
        + (f'<p class="options">Options: {_esc(options)}</p>' if options else "")
        + f'<p class="reference"><strong>Reference:</strong> {_esc(item.reference)}</p>'
        f'<div class="scroll"><table class="answers"><thead>{head}</thead><tbody>{_answer_row(item)}</tbody>'
        "</table></div></div></article>"
    )


def _select(name: str, label: str, options: Mapping[str, str]) -> str:
    """Returns a filter: a ``<select>`` of ``options`` (value -> text) after "all"."""
    shown = "".join(f'<option value="{_esc(value)}">{_esc(text)}</option>' for value, text in options.items())
    return (
        f'<label>{_esc(label.capitalize())} <select name="{name}" data-label="{label}">'
        f'<option value="">all</option>{shown}</select></label>'
    )


def items_section(shown: list[BenchItems], cap: int) -> str:
    """Returns the item browser: what the cap left out, the filters, the count the script fills, the notes on
    rows that could not be shown, and every item."""
    items = [item for bench in shown for item in bench.items]
    models = sorted({b.model for b in shown})
    methods = {a.method: a.label for item in items for a in item.answers}
    sizes = "; ".join(
        f"{b.bench}: {len(b.items)} of {b.total} items" + (f" ({b.model})" if len(models) > 1 else "") for b in shown
    )
    cap_note = (
        f"At most {cap} items per benchmark are inlined (items_per_benchmark={cap}, conf/make_html_report.yaml), "
        f"evenly spaced over each benchmark file: {sizes}. Every item's answers are in each result's "
        "<bench>.predictions.jsonl. Trained rows: the checkpoint each leaf evaluated (the grid seed's; other "
        "training seeds' results, under <results_root>/seed<s>/, are not browsed)."
    )
    filters = (
        (_select("model", "model", {m: m for m in models}) if len(models) > 1 else "")
        + _select("bench", "benchmark", {b: b for b in sorted({b.bench for b in shown})})
        + _select("method", "method", dict(sorted(methods.items())))
    )
    notes = [f"{b.bench} ({b.model}): {note}" for b in shown for note in b.notes]
    noted = f'<ul class="notice">{"".join(f"<li>{_esc(n)}</li>" for n in notes)}</ul>' if notes else ""
    return (
        f'<section id="items"><h2>Items</h2><p id="item-cap">{_esc(cap_note)}</p>'
        f'<form id="item-filters">{filters}</form><p id="item-count">{len(items)} items</p>{noted}'
        + "".join(item_html(item) for item in items)
        + "</section>"
    )


def page_html(tc: HtmlReportConfig, found: Found) -> str:
    """Returns the whole report page of the study ``tc`` names, whose results are ``found``."""
    tables = tables_dir(tc.results_root, tc.experiment)
    listed, drawn, undrawn = index_entries(tables)
    labels = (load_yaml(CONF_DIR / "make_tables.yaml") or {})["method_labels"]
    shown = browse(found, labels, tc.items_per_benchmark, tc.output_chars)
    cells = found.results
    summary = (
        f"{len(cells)} greedy results under {found.folder}/: models {', '.join(sorted({c.model for c in cells}))}; "
        f"methods {', '.join(sorted({c.method for c in cells}))}; "
        f"benchmarks {', '.join(sorted({c.bench for c in cells}))}. Tables and plots: {tables}/ (make_tables)."
    )
    nav = (
        '<a href="#protocol">Protocol card</a>'
        f'<a href="#tables">Tables ({len(listed)})</a><a href="#plots">Plots ({len(drawn)})</a>'
        f'<a href="#items">Items ({sum(len(b.items) for b in shown)})</a>'
    )
    style = (ASSETS_DIR / "report.css").read_text(encoding="utf-8")
    script = (ASSETS_DIR / "report.js").read_text(encoding="utf-8")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Study report: {_esc(tc.experiment)}</title><style>{style}</style></head><body>"
        f'<header><h1>Study report: {_esc(tc.experiment)}</h1><p class="meta">{_esc(summary)}</p>'
        f'<p class="meta">Written by <code>python src/make_html_report.py experiment={_esc(tc.experiment)}</code>; '
        "one file, images and plots inlined: no server or network needed.</p>"
        f"<nav>{nav}</nav></header><main>"
        + protocol_section(tables, tc.experiment)
        + tables_section(tables, listed)
        + plots_section(tables, drawn, undrawn)
        + items_section(shown, tc.items_per_benchmark)
        + f"</main><script>{script}</script></body></html>\n"
    )


def run(cfg: DictConfig) -> Path:
    """Returns the report file after writing it (atomically) for the study of ``cfg``.

    Raises ``ValueError`` before writing anything when the study has no results or no tables yet
    (``check_inputs``).
    """
    tc = load_html_report_config(cfg)
    out = Path(tc.out)
    atomic_write_text(out, page_html(tc, discover(tc.results_root, tc.experiment)))
    return out
