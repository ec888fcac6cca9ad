"""The recipe of docs/extending.md, "Add a table", followed with a toy table block and a toy report kind.

Each toy is exactly what the recipe says to write. A table of the grid's cells is one block under ``grid.tables``
of a study preset (here a user's ``experiment/toy_tables.yaml`` in a ``--config-dir``, starting from the shipped
``tiny`` study). A new kind of page is one module in ``sparsectx.report`` with its renderer (here in a folder
the package searches after its own, ``report_folder``), one ``ReportKind`` record in
``sparsectx.workflow.report_specs`` (here run as if appended to that file) and an entry of that kind under
``grid.report``. No other file is written or edited: ``make_tables`` then renders both from the results on disk
(fixture leaves of ``test_intervals``), lists them in its index, and the grid's checks read the record.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from component_folders import appended_to_module, component_folder
from hydra import compose
from omegaconf import DictConfig

import sparsectx.report as report_package
import sparsectx.workflow.report_specs as report_specs
from sparsectx.cli import config_search
from sparsectx.data.tsv import write_tsv
from sparsectx.paths import leaf_dir, result_path
from sparsectx.report.study import run
from sparsectx.workflow.report_specs import REPORT_KINDS

from .test_intervals import BENCHES, RIGHT, bench_items, write_leaf

CONF = Path(__file__).resolve().parents[2] / "conf"

RENDERER = '''
"""Toy report kind: every cell of one table block with its score, or the reason it has none."""

from __future__ import annotations

from sparsectx.report.analyses import Figure, SideTable
from sparsectx.report.collect import method_label, score_of
from sparsectx.report.extras import Page, ReportInputs, side_page


def cell_scores_pages(inputs: ReportInputs) -> tuple[list[Page], list[Figure]]:
    """Returns one page: a row per cell of the entry's block, its score or the reason it has none."""
    (block,) = [b for b in inputs.grid.blocks if b.name == inputs.spec.blocks[0]]
    rows = []
    for cell in inputs.grid.block_cells(block):
        score, reason = score_of(inputs.entries, cell)
        shown = "—" if score is None else f"{score:.{inputs.decimals}f}"
        label = method_label(cell.method, inputs.labels)
        rows.append((cell.model, label, cell.pruner, f"{cell.budget:g}", cell.bench, shown, reason))
    columns = ("model", "method", "pruner", "budget", "benchmark", "score", "note")
    return [side_page(inputs.spec.name, inputs.title, SideTable(columns, tuple(rows)))], []
'''

RECORD = """
REPORT_KINDS.register("toy_cell_scores")(
    ReportKind(
        needs=("blocks",),
        render="sparsectx.report.toy_cell_scores:cell_scores_pages",
        title="every cell's score",
        one_block=True,
    )
)
"""

PRESET = """\
# @package _global_
# The tiny study plus one table block and one entry of the toy report kind
# (tests/report/test_recipe_add_a_table.py). Its results are the tiny study's: experiment stays `tiny`.
#   python src/make_tables.py --config-dir <this folder> experiment=toy_tables blocks=[toy_block,toy_scores]
defaults:
  - tiny
  - _self_

grid:
  tables:
    toy_block:                 # SCOPD against the untrained model at 10%, and the full context
      models: [tiny]
      benchmarks: [syn_count, syn_pope]
      rows:
        - {methods: [base, scopd], pruners: [visionzip], budgets: [1.0, 0.1]}
  report:
    toy_scores: {kind: toy_cell_scores, blocks: [toy_block]}
"""


@pytest.fixture
def report_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], Path]]:
    """Returns ``write(module, source)``, which writes ``<module>.py`` into a folder that ``sparsectx.report``
    searches after its own, as if the file were put beside the shipped report modules (``component_folder``)."""
    yield from component_folder(tmp_path / "report_modules", monkeypatch, report_package, REPORT_KINDS)


@pytest.fixture
def toy_tables(report_folder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Follows the recipe (the renderer module, the kind's record, the preset) and returns the user's config
    folder holding the preset."""
    report_folder("toy_cell_scores", RENDERER)
    appended_to_module(report_specs, RECORD, monkeypatch, REPORT_KINDS)
    conf = tmp_path / "my_conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "experiment" / "toy_tables.yaml").write_text(PRESET)
    return conf


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Returns the results root holding the tiny study's leaves the toy block reads (base and SCOPD at 1.0 and
    0.1 on two benchmarks of 30 items)."""
    data = tmp_path / "data"
    data.mkdir()
    for bench in BENCHES:
        write_tsv(data / f"{bench}.tsv", bench_items(bench))
        for (method, budget), right in RIGHT.items():
            write_leaf(tmp_path / "results", data, method, budget, bench, right)
    return tmp_path / "results"


def compose_with(conf: Path, overrides: list[str]) -> DictConfig:
    """Returns ``make_tables`` composed as ``src/make_tables.py --config-dir <conf> <overrides>`` composes it."""
    with config_search(CONF, conf, None):
        return compose("make_tables", overrides=overrides)


def tables_overrides(results: Path, blocks: str) -> list[str]:
    """Returns the command line of ``make_tables`` on the toy preset, rendering ``blocks`` only."""
    return [
        "experiment=toy_tables",
        f"results_root={results}",
        f"runs_root={results.parent / 'runs'}",
        "logger=none",
        "bootstrap.resamples=50",
        f"blocks={blocks}",
    ]


def read_csv(path: Path) -> list[dict[str, str]]:
    """Returns the rows of a CSV file."""
    return list(csv.DictReader(io.StringIO(path.read_text())))


def score(results: Path, method: str, budget: float, bench: str) -> float:
    """Returns the ``score`` of one fixture leaf's result JSON."""
    return json.loads(result_path(leaf_dir(results, "tiny", "tiny", method, "visionzip", budget), bench).read_text())[
        "score"
    ]


def test_the_record_is_registered_and_the_grid_checks_read_it(toy_tables, results) -> None:
    kind = REPORT_KINDS.get("toy_cell_scores")
    assert (kind.needs, kind.one_block, kind.title) == (("blocks",), True, "every cell's score")
    bad = tables_overrides(results, "[toy_block,toy_scores]")
    bad.append("+grid.report.toy_scores.window=5")
    with pytest.raises(ValueError, match=r"grid.report.toy_scores: kind 'toy_cell_scores' takes exactly \['blocks'\]"):
        run(compose_with(toy_tables, bad))
    two_blocks = [
        *tables_overrides(results, "[toy_block,toy_scores]"),
        "grid.report.toy_scores.blocks=[toy_block,main]",
    ]
    with pytest.raises(ValueError, match=r"kind 'toy_cell_scores' reads exactly one block"):
        run(compose_with(toy_tables, two_blocks))


def test_make_tables_renders_the_toy_block_and_the_toy_page(toy_tables, results) -> None:
    paths = run(compose_with(toy_tables, tables_overrides(results, "[toy_block,toy_scores]")))
    out = results / "tiny" / "tables"
    assert {out / "toy_block.md", out / "toy_block.csv", out / "toy_scores.md", out / "toy_scores.csv"} <= set(paths)

    block = {(row["method"], row["budget"]): row for row in read_csv(out / "toy_block.csv")}
    assert set(block) == {(m, b) for m in ("Vanilla", "SCOPD") for b in ("1", "0.1")}
    for (method, budget), row in block.items():
        key = "base" if method == "Vanilla" else "scopd"
        for bench in BENCHES:
            assert row[bench] == f"{score(results, key, float(budget), bench):.2f}", (method, budget, bench)

    page = read_csv(out / "toy_scores.csv")
    assert len(page) == 2 * 2 * 2  # 2 methods x 2 budgets x 2 benchmarks, each cell once
    for row in page:
        key = "base" if row["method"] == "Vanilla" else "scopd"
        assert row["score"] == f"{score(results, key, float(row['budget']), row['benchmark']):.2f}"
        assert row["note"] == ""
    assert (out / "toy_scores.md").read_text().startswith("# tiny: toy_scores, every cell's score\n")
    assert "**toy_scores**: tiny: toy_scores, every cell's score" in (out / "README.md").read_text()


def test_an_unknown_kind_is_refused_naming_the_entry_and_the_kinds(toy_tables, results) -> None:
    overrides = [*tables_overrides(results, "[toy_block,toy_scores]"), "grid.report.toy_scores.kind=toy_cell_score"]
    with pytest.raises(KeyError, match=r"grid.report.toy_scores.kind='toy_cell_score': .*'toy_cell_scores'"):
        run(compose_with(toy_tables, overrides))
