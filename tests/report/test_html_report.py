"""``make_html_report``: one static HTML file of a study, opened in headless Chromium (Debian's ``chromium``).

The results tree is ``test_intervals``' (SCOPD trained at 10%, two benchmarks of 30 items, their benchmark files
written here); its predictions get the fields ``evaluate.py`` writes (correctness, the raw output), and
``make_tables`` writes its tables first, as the Snakemake rule does. The page is read back as Chromium renders it
(``--dump-dom``, after the page's script ran) and photographed (``--screenshot``).

Chromium's headless flags (developer.chrome.com/docs/chromium/headless, "Headless mode flags"): ``--dump-dom`` prints
the serialised DOM once the page has loaded, so its inline script has run; ``--screenshot`` writes a PNG of the
window (``--window-size``). Seen with Debian 12's chromium 150: a view scrolled away from the top (by a fragment
or the script) is captured blank, so the screenshots use a window taller than the page. ``--no-sandbox``: the
suite may run as root, where Chromium refuses its sandbox.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from PIL import Image

from sparsectx import workflow as wf
from sparsectx.data.tsv import write_tsv
from sparsectx.eval.results import write_rows
from sparsectx.io import read_jsonl
from sparsectx.paths import leaf_dir, predictions_path
from sparsectx.report import study
from sparsectx.report.html_markdown import markdown_html
from sparsectx.report.html_report import run

from .test_intervals import BENCHES, RIGHT, bench_items, compose_tables, write_leaf

CHROMIUM = shutil.which("chromium")
INSTALL = "apt-get install -y --no-install-recommends chromium"
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason=f"Debian's chromium is not installed: {INSTALL} (make test installs it as root)"
)
CAP = 4
"""items_per_benchmark of the report under test (each benchmark has 30 items)."""
PAGE_BACKGROUND = np.array([0xF6, 0xF7, 0xF9])
"""The page's background colour (``sparsectx/assets/html_report/report.css``)."""
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Returns a results root holding the leaves of ``test_intervals.GRID``, their predictions with each item's
    correctness and raw output, and the tables ``make_tables`` wrote from them."""
    data = tmp_path / "data"
    data.mkdir()
    for bench in BENCHES:
        write_tsv(data / f"{bench}.tsv", bench_items(bench))
    root = tmp_path / "results"
    for (method, budget), right in RIGHT.items():
        for bench in BENCHES:
            write_leaf(root, data, method, budget, bench, right)
            path = predictions_path(leaf_dir(root, "tiny", "tiny", method, "visionzip", budget), bench)
            rows = [
                {
                    **row,
                    "correct": i in right,
                    "status": "tagged",
                    "error": "",
                    "output": f"<think>{method} at {budget}</think><answer>{row['answer']}</answer>",
                }
                for i, row in enumerate(read_jsonl(path))
            ]
            write_rows(path, rows)
    study.run(compose_tables(root, "bootstrap.resamples=50"))
    return root


def compose_report(root: Path, *overrides: str) -> DictConfig:
    """Returns ``conf/make_html_report.yaml`` for the tiny preset's study under ``root``."""
    with initialize_config_dir(version_base=None, config_dir=str(wf.CONF_DIR)):
        return compose("make_html_report", overrides=["experiment=tiny", f"results_root={root}", *overrides])


@dataclass
class Node:
    """One element of a rendered page: its tag, attributes, children and text."""

    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    parts: list[str | Node] = field(default_factory=list)

    def text(self) -> str:
        """Returns the element's text, its descendants' included, whitespace collapsed."""
        joined = "".join(p if isinstance(p, str) else p.text() for p in self.parts)
        return " ".join(joined.split())

    def matches(self, tag: str, attrs: dict[str, str]) -> bool:
        """Returns whether the element is a ``tag`` whose attributes include ``attrs`` (``class_`` for ``class``)."""
        return self.tag == tag and all(self.attrs.get(k.rstrip("_")) == v for k, v in attrs.items())

    def find_all(self, tag: str, **attrs: str) -> list[Node]:
        """Returns every descendant that ``matches`` ``tag`` and ``attrs``, in document order."""
        found = []
        for child in self.children:
            found += [child] if child.matches(tag, attrs) else []
            found += child.find_all(tag, **attrs)
        return found

    def visible(self, tag: str, **attrs: str) -> list[Node]:
        """Returns the descendants ``find_all`` returns that neither carry ``hidden`` nor sit under one that does."""
        found = []
        for child in self.children:
            if "hidden" not in child.attrs:
                found += [child] if child.matches(tag, attrs) else []
                found += child.visible(tag, **attrs)
        return found


class TreeBuilder(HTMLParser):
    """Builds the ``Node`` tree of a page (the HTML Chromium serialises is well nested)."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Node("document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        self.stack[-1].parts.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        while len(self.stack) > 1 and self.stack.pop().tag != tag:
            pass

    def handle_data(self, data: str) -> None:
        self.stack[-1].parts.append(data)


def rendered(page: Path, fragment: str, profile: Path) -> Node:
    """Returns the DOM of ``page`` after Chromium loaded it at ``#<fragment>`` and its script ran."""
    run_chromium = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}"]
    url = page.resolve().as_uri() + (f"#{fragment}" if fragment else "")
    done = subprocess.run([*run_chromium, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    builder = TreeBuilder()
    builder.feed(done.stdout)
    return builder.root


def main_csv(results: Path) -> list[dict[str, str]]:
    """Returns the rows of the ``main`` table's CSV, in order (budget blocks as the Markdown orders them)."""
    return list(csv.DictReader(io.StringIO((study.tables_dir(results, "tiny") / "main.csv").read_text())))


@needs_chromium
def test_the_browser_shows_the_tables_and_filters_items_by_the_url_fragment(results: Path, tmp_path: Path) -> None:
    card = wf.REPO_DIR / "docs" / "protocols" / "scopd_qwen2_5_vl_7b.md"  # a card as make_tables writes it
    shutil.copy(card, study.tables_dir(results, "tiny") / "protocol.md")
    page = run(compose_report(results, f"items_per_benchmark={CAP}"))
    assert page == results / "tiny" / "report.html"
    dom = rendered(page, "bench=syn_pope&method=scopd", tmp_path / "profile")
    (protocol,) = dom.find_all("section", id="protocol")
    assert protocol.find_all("summary")[0].text() == "Protocol card: scopd_qwen2_5_vl_7b"
    settings = {
        row[1]: row for tr in protocol.find_all("tr") if len(row := [td.text() for td in tr.find_all("td")]) > 2
    }
    instruction = "First output the thinking process in <think> </think> tags and then output the final answer"
    assert settings["train_data.instruction"][2].startswith(instruction)  # quoted tags shown as text, not elements
    (main,) = dom.find_all("section", id="table-main")
    shown_rows = [row for tr in main.find_all("tr") if len(row := [td.text() for td in tr.find_all("td")]) > 1]
    expected = main_csv(results)
    assert [row[:2] for row in shown_rows] == [[r["method"], r["pruner"]] for r in expected]
    for row, written in zip(shown_rows, expected, strict=True):  # each cell: the score, then its interval
        for column, bench in enumerate(BENCHES, start=2):
            assert row[column] == f"{written[bench]} [{written[bench + ' lo']}, {written[bench + ' hi']}]" + (
                " ↑" if bench in written["above_untrained"].split(";") else ""
            )

    shown = dom.visible("article", class_="item")
    picked = [str(i * 30 // CAP) for i in range(CAP)]  # every 30/CAP-th item of the benchmark file, in order
    assert [(a.attrs["data-bench"], a.attrs["data-id"]) for a in shown] == [("syn_pope", i) for i in picked]
    assert len(dom.find_all("article", class_="item")) == CAP * len(BENCHES)
    (count,) = dom.find_all("p", id="item-count")
    assert count.text() == f"{CAP} of {CAP * len(BENCHES)} items shown (benchmark syn_pope, method SCOPD)"
    for article in shown:
        index = int(article.attrs["data-id"])
        assert f"q{index}" in article.find_all("p", class_="question")[0].text()
        assert article.find_all("p", class_="reference")[0].text() == f"Reference: {'yes' if index % 2 else 'no'}"
        (image,) = article.find_all("img")
        assert image.attrs["src"].startswith("data:image/")
        rows = article.visible("tr", class_="output")
        assert [(r.attrs["data-method"], r.attrs["data-budget"]) for r in rows] == [("scopd", "1"), ("scopd", "0.1")]
        for row, budget in zip(rows, (1.0, 0.1), strict=True):
            right = index in RIGHT[("scopd", budget)]
            assert row.find_all("td", class_="mark")[0].text() == ("✓" if right else "✗")
            assert f"<think>scopd at {budget}</think>" in row.find_all("td", class_="response")[0].text()
        assert len(article.find_all("tr", class_="output")) == len(RIGHT)  # the other rows are there, hidden
    opened = {  # a table's link opens its folded section; the first table is open, the others folded
        section.attrs["id"]: "open" in section.find_all("details")[0].attrs
        for section in rendered(page, "table-main.delta", tmp_path / "profile").find_all("section", class_="table")
    }
    assert opened == {"table-main": True, "table-main.recovery": False, "table-main.delta": True}
    (note,) = dom.find_all("p", id="item-cap")
    assert f"items_per_benchmark={CAP}" in note.text() and "syn_count: 4 of 30 items" in note.text()


def test_rows_and_benchmarks_that_cannot_be_shown_are_named_with_the_reason(results: Path) -> None:
    leaf = leaf_dir(results, "tiny", "tiny", "scopd", "visionzip", 0.1)
    predictions_path(leaf, "syn_count").unlink()
    moved = results.parent / "data" / "syn_pope.tsv"
    moved.rename(moved.with_suffix(".moved"))
    text = run(compose_report(results, f"items_per_benchmark={CAP}")).read_text()
    assert f"syn_count (tiny): SCOPD / visionzip / 0.1: not shown, no per-item predictions ({leaf}/syn_count." in text
    assert "syn_pope (tiny): no items shown (they are read from the benchmark file base / visionzip / 1 was " in text
    assert f"no syn_pope.tsv at {moved}" in text
    assert text.count('<article class="item" data-model="tiny" data-bench="syn_count"') == CAP
    assert 'data-bench="syn_pope" data-id' not in text


def screenshot(page: Path, fragment: str, height: int, tmp_path: Path) -> np.ndarray:
    """Returns the RGB pixels of ``page`` at ``#<fragment>`` as Chromium draws it in a 1200-px wide window."""
    shot = tmp_path / f"shot{len(list(tmp_path.glob('shot*')))}.png"
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        f"--user-data-dir={tmp_path / 'p'}",
        "--hide-scrollbars",
        f"--window-size=1200,{height}",
        f"--screenshot={shot}",
        page.resolve().as_uri() + (f"#{fragment}" if fragment else ""),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with Image.open(shot) as image:
        assert image.size == (1200, height)
        return np.asarray(image.convert("RGB"))


def drawn_until(pixels: np.ndarray) -> int:
    """Returns the last pixel row holding anything but the page's background (``report.css``: #f6f7f9)."""
    differs = np.abs(pixels.astype(int) - PAGE_BACKGROUND).sum(axis=2) > 8
    return int(np.nonzero(differs.any(axis=1))[0].max())


@needs_chromium
def test_the_screenshot_draws_the_page_and_leaves_filtered_items_out(results: Path, tmp_path: Path) -> None:
    page = run(compose_report(results, f"items_per_benchmark={CAP}", f"out={tmp_path / 'page.html'}"))
    first_screen = screenshot(page, "", 900, tmp_path)
    assert len(np.unique(first_screen.reshape(-1, 3), axis=0)) > 50  # text, tables and marks drawn, not a blank page
    height = 6000  # taller than the page: nothing scrolls, so the whole page is drawn (headless draws no scrolled view)
    everything = drawn_until(screenshot(page, "", height, tmp_path))
    filtered = drawn_until(screenshot(page, "bench=syn_pope", height, tmp_path))
    assert everything < height - 100
    assert everything - filtered > CAP * 100  # the other benchmark's items are not drawn (each is > 100 px high)


def test_a_study_without_results_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    out = tmp_path / "nowhere" / "report.html"
    with pytest.raises(ValueError, match=r"no results under .*tiny/.*run the study first: snakemake "):
        run(compose_report(tmp_path / "results", f"out={out}"))
    assert not out.parent.exists()


def test_results_without_tables_name_make_tables(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_tsv(data / "syn_count.tsv", bench_items("syn_count"))
    write_leaf(tmp_path / "results", data, "base", 1.0, "syn_count", set(range(3)))
    with pytest.raises(ValueError, match=r"python src/make_tables.py experiment=tiny results_root=\S+ first"):
        run(compose_report(tmp_path / "results"))
    assert not (tmp_path / "results" / "tiny" / "report.html").exists()


def test_the_command_refuses_an_empty_study_in_one_line(tmp_path: Path) -> None:
    script = wf.REPO_DIR / "src" / "make_html_report.py"
    command = [sys.executable, str(script), "experiment=never_run", f"results_root={tmp_path}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: no results under {tmp_path}/never_run/")
    assert list(tmp_path.iterdir()) == []  # no log, no folder, no report


def test_markdown_keeps_the_tables_marks_and_escapes_everything_else() -> None:
    text = "# T\n\n| a \\| b | n |\n|:--|--:|\n| *Retain 10%* | | \n| **1.00** | <u>2</u><sup>1</sup> <think> |\n"
    html = markdown_html(text + "\n- <sup>1</sup> why: `x`\n")
    assert "<h1>T</h1>" in html
    assert "<th>a | b</th>" in html and '<th class="num">n</th>' in html
    assert '<td colspan="2"><em>Retain 10%</em></td>' in html
    assert '<td><strong>1.00</strong></td><td class="num"><u>2</u><sup>1</sup> &lt;think&gt;</td>' in html
    assert "<li><sup>1</sup> why: <code>x</code></li>" in html


def test_the_snakemake_target_builds_the_report_after_the_tables(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(wf.REPO_DIR / "Snakefile"),
        "--directory",
        str(tmp_path),
        "-n",
        "-p",
        "--workflow-profile",
        "none",
        "html_report",
        "--config",
        "experiment=tiny_demo",
    ]
    done = subprocess.run(command, cwd=wf.REPO_DIR, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "src/make_html_report.py experiment=tiny_demo" in done.stdout
    assert "output: results/tiny_demo/report.html" in done.stdout
    assert "make_tables" in done.stdout.split("Job stats:")[1]
