"""docs/benchmarks.md's table states each real benchmark's config as it is: a row per real benchmark, with
its VLMEvalKit dataset name, file names, prompt parts, scorer and headline (where the scorer reports several)
equal to ``conf/bench/<name>.yaml``'s."""

from __future__ import annotations

import re

from sparsectx.eval.config import CONF_DIR, compose_bench

DOC = CONF_DIR.parent / "docs" / "benchmarks.md"


def _rows() -> dict[str, list[str]]:
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 8 and cells[0] not in ("benchmark", "---"):
            rows[cells[0]] = cells
    return rows


def _real() -> list[str]:
    return sorted(
        path.stem
        for path in (CONF_DIR / "bench").glob("*.yaml")
        if "layout:" in path.read_text() and "the project's own file" not in path.read_text()
    )


def test_every_real_benchmark_has_one_row_that_states_its_config() -> None:
    rows = _rows()
    assert sorted(rows) == _real()
    for name, (_, dataset, files, _columns, _gold, prompt, scorer, _source) in rows.items():
        spec = compose_bench(name)
        text = (CONF_DIR / "bench" / f"{name}.yaml").read_text()
        parts = re.search(r"/bench_prompt@layout.prompt: (\S+)", text).group(1)
        assert dataset == spec.dataset_name, name
        assert [f.strip() for f in files.split(",")] == spec.layout.files, name
        assert prompt.split(" ")[0] == parts, name
        assert scorer == (spec.scorer if spec.headline is None else f"{spec.scorer}, headline {spec.headline}"), name
