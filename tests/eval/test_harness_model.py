"""The model behind the harness adapters answers as ``evaluate.py`` does (``sparsectx.eval.harness``).

The reference is the runner itself: ``sparsectx.eval.runner.run`` on the shipped tiny model with a random
pruner at 25% writes its predictions; ``HarnessModel`` loaded from the same overrides, given the rows as a
harness hands them over (raw TSV cells, the question already formatted, one row per call), must generate
the same text item by item. No harness is needed for this part.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from sparsectx.data import read_tsv, write_tsv
from sparsectx.data.build import load_build_config
from sparsectx.data.synthetic import generate_bench
from sparsectx.eval.harness import HarnessModel, formatted, image_bytes_of, item_from_row
from sparsectx.eval.runner import run

from .test_runner_support import CONF, compose_eval


def mcq_tsv(path: Path, n: int) -> Path:
    """Returns ``path`` holding the first ``n`` rows of a synthetic multiple-choice benchmark (varied items)."""
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        cfg = compose("build_data", overrides=[f"data.out_dir={path.parent}", "processor.write=false"])
    items, _ = generate_bench(load_build_config(cfg).data, "syn_mcq")
    write_tsv(path, items[:n])
    return path


OVERRIDES = [
    "model=tiny",
    "pruner=random",
    "budget=0.1",
    "bench=syn_mcq",
    "bench.syn_mcq.max_new_tokens=24",
    "bench.syn_mcq.scorer=mcq_vlmeval",
    "batch_size=4",
]


@pytest.fixture(scope="module")
def leaf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Returns (benchmark TSV, predictions JSONL) of an ``evaluate.py`` run on 6 multiple-choice rows."""
    root = tmp_path_factory.mktemp("harness")
    tsv = mcq_tsv(root / "mcq.tsv", 8)
    cfg = compose_eval([*OVERRIDES, f"bench.syn_mcq.path={tsv}", "logger=none", f"results_root={root}"])
    (result,) = run(cfg)
    return tsv, result.parent / "syn_mcq.predictions.jsonl"


def _raw_rows(path: Path) -> list[dict[str, str]]:
    csv.field_size_limit(2**31 - 1)
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


@pytest.mark.slow
def test_harness_model_generates_what_evaluate_generated(leaf: tuple[Path, Path]) -> None:
    tsv, predictions = leaf
    expected = {row["id"]: row for row in map(json.loads, predictions.read_text().splitlines())}
    model = HarnessModel.from_overrides([*OVERRIDES, f"bench.syn_mcq.path={tsv}"])
    assert model.max_new_tokens("syn_mcq") == 24 and model.max_new_tokens("MME") == 1024
    hint = model.cfg.prompt.mcq_hint
    outputs = {}
    for row in _raw_rows(tsv):  # one call per row, as VLMEvalKit's inference calls generate
        item = formatted(item_from_row(row, image_bytes_of(row["image"])), hint)
        (generated,) = model.generate([item], "syn_mcq", model.max_new_tokens("syn_mcq"))
        outputs[generated.id] = (generated.prompt, generated.output, generated.answer, generated.kept_visual)
    assert outputs == {
        i: (row["prompt"], row["output"], row["answer"], row["kept_visual"]) for i, row in expected.items()
    }


def test_item_from_row_equals_the_tsv_reader(leaf: tuple[Path, Path]) -> None:
    tsv, _ = leaf
    items, _ = read_tsv(tsv)
    for item, row in zip(items, _raw_rows(tsv), strict=True):
        mine = item_from_row(row, image_bytes_of(row["image"]))
        assert (mine.index, mine.image_bytes, mine.question, mine.options, mine.answer, mine.category) == (
            item.index,
            item.image_bytes,
            item.question,
            item.options,
            item.answer,
            item.category,
        )


def test_pandas_cells_read_as_the_tsv_reader_reads_them() -> None:
    """Harness rows come from pandas: absent options are NaN, an index may be a string (HallusionBench)."""
    row = {
        "index": "VD_figure_1_0_0_1",
        "question": "q",
        "A": "yes",
        "B": float("nan"),
        "C": "",
        "answer": "A",
    }
    item = item_from_row(row, b"png")
    assert item.options == {"A": "yes"} and item.index == "VD_figure_1_0_0_1" and item.category == ""
    assert formatted(item, "Answer with the option's letter.").question == "q\nA. yes\nAnswer with the option's letter."


def test_bad_overrides_fail_as_evaluate_fails() -> None:
    with pytest.raises(ValueError, match="budget"):
        HarnessModel.from_overrides(["model=tiny", "budget=2.0"])
