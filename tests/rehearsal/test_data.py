"""The rehearsal's miniature data against the two real presets: every benchmark they schedule is written where
``path: null`` finds it and reads through the evaluation's loader and the preflight, row for row; the Pass@K and
efficiency protocols find their items; each training file converts and loads as the preset's train jobs read it."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from transformers import AutoTokenizer

from sparsectx.eval.config import compose_bench
from sparsectx.eval.efficiency_protocol import select_questions
from sparsectx.eval.passk_cohort import numeric_items
from sparsectx.eval.protocol import LMU_DATA, bench_files, load_bench_items
from sparsectx.models import resolve_model_path
from sparsectx.preflight.benchmark import check_benchmark
from sparsectx.preflight.training import check_train_file
from sparsectx.rehearsal.data import BUILDERS, real_files, write_benchmarks, write_training_file
from sparsectx.training.batches import TrainingSet
from sparsectx.training.config import load_train_config
from sparsectx.workflow import load_grid, load_rehearsal
from sparsectx.workflow.commands import train_args
from sparsectx.workflow.config import CONF_DIR

PRESETS = ("scopd_qwen2_5_vl_7b", "ltopd_qwen3_5_4b")
GRIDS = {preset: load_grid(preset) for preset in PRESETS}
BENCHMARKS = sorted({name for grid in GRIDS.values() for name in grid.benchmarks})
"""Every benchmark either real preset declares."""


def block_benchmarks(preset: str, kind: str) -> list[str]:
    """Returns the benchmarks of the preset's blocks of ``kind`` (``passk``, ``efficiency``)."""
    return sorted({name for block in GRIDS[preset].blocks if block.kind == kind for name in block.benchmarks})


def override(preset: str, stage: str, key: str) -> str:
    """Returns the value the preset's ``stage`` overrides give ``key``."""
    (value,) = [o.split("=", 1)[1] for o in GRIDS[preset].overrides(stage) if o.startswith(f"{key}=")]
    return value


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Returns the folder holding every benchmark's miniature file(s), written once."""
    folder = tmp_path_factory.mktemp("rehearsal") / "data"
    written = write_benchmarks(BENCHMARKS, folder)
    assert sorted(written) == BENCHMARKS
    return folder


@pytest.fixture
def lmu_data(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Returns the data folder, set as ``$LMUData`` as the rehearsal's jobs see it."""
    monkeypatch.setenv(LMU_DATA, str(data_dir))
    return data_dir


def test_every_benchmark_of_both_presets_has_a_miniature_file() -> None:
    assert set(BENCHMARKS) <= set(BUILDERS), sorted(set(BENCHMARKS) - set(BUILDERS))


@pytest.mark.parametrize("name", BENCHMARKS)
def test_the_loader_finds_and_reads_every_row(name: str, lmu_data: Path) -> None:
    spec = compose_bench(name)  # path: null, as the presets leave it
    assert spec.path is None
    assert bench_files(spec) == [lmu_data / file for file in spec.layout.files]
    parts = real_files(name)
    items, skips, dropped = load_bench_items(spec, 0.0)
    assert skips == [], f"{name}: rows refused: {skips}"
    assert len(dropped) == sum(part.dropped for part in parts), f"{name}: dropped {dropped}"
    assert len(items) == sum(len(part.rows) - part.dropped for part in parts)
    assert check_benchmark(spec).problems == [], f"{name}: the preflight refuses the file"


def test_writing_again_leaves_unchanged_files_untouched(data_dir: Path) -> None:
    before = {path: path.stat().st_mtime_ns for path in data_dir.rglob("*") if path.is_file()}
    write_benchmarks(BENCHMARKS, data_dir)
    after = {path: path.stat().st_mtime_ns for path in data_dir.rglob("*") if path.is_file()}
    assert after == before


@pytest.mark.parametrize("name", block_benchmarks("scopd_qwen2_5_vl_7b", "passk"))
def test_the_paper_numeric_cohort_has_items_from_every_source(name: str, lmu_data: Path) -> None:
    assert override("scopd_qwen2_5_vl_7b", "passk", "passk.cohort") == "paper_numeric"
    kept, counts = numeric_items(load_bench_items(compose_bench(name), 0.0).items)
    assert kept and counts["qualified"] == len(kept), f"{name}: no numeric item ({counts})"


def test_the_ltopd_efficiency_protocol_selects_a_textvqa_question(lmu_data: Path) -> None:
    preset = "ltopd_qwen3_5_4b"
    assert block_benchmarks(preset, "efficiency") == ["textvqa"]
    assert override(preset, "efficiency", "efficiency.protocol") == "ltopd"
    min_tokens = int(override(preset, "efficiency", "efficiency.min_answer_tokens"))
    spec = compose_bench("textvqa")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("package:tiny-vlm"))
    assert select_questions(load_bench_items(spec, 0.0).items, spec, tokenizer, min_tokens)


@pytest.mark.parametrize("preset", PRESETS)
def test_the_training_file_loads_as_the_presets_train_jobs_read_it(
    preset: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    grid = GRIDS[preset]
    (path,) = grid.train_files()
    monkeypatch.chdir(tmp_path)  # the rehearsal's working directory: train_data.path is relative to it
    write_training_file(Path(path))
    args = [*train_args(grid, grid.train_runs[0]), *load_rehearsal().stage_overrides("train")]
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
        cfg = load_train_config(compose("train", overrides=args))
    assert cfg.train_data.path == path
    with caplog.at_level(logging.WARNING, logger="sparsectx.training.batches"):
        data = TrainingSet.load(cfg.train_data, cfg.seed, cfg.method.effective_batch_size)
    assert caplog.records == [], "the sampler's batches are not the run's steps, or rows were skipped"
    assert len(data.items) == 32 and all(item.image_bytes for item in data.items)
    assert len(data.items) >= cfg.steps * cfg.method.effective_batch_size
    assert check_train_file(path, cfg.train_data.max_skip_fraction, CONF_DIR).problems == []
    written = Path(path).stat().st_mtime_ns
    assert write_training_file(Path(path)).stat().st_mtime_ns == written, "the same conversion rewrote the file"
    if cfg.train_data.order == "file":  # LT-14K: every step's batch is one sampler batch, its sources balanced
        batch = cfg.method.effective_batch_size
        sources = Counter(item.category for item in data.items)
        for step in range(len(data.items) // batch):
            rows = data.items[step * batch : (step + 1) * batch]
            assert {item.extra["batch"] for item in rows} == {str(step)}
            assert Counter(item.category for item in rows) == {name: batch // len(sources) for name in sources}


def test_a_file_no_recipe_writes_and_a_mixture_of_partial_batches_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no recipe the rehearsal can convert writes 'train.tsv'"):
        write_training_file(tmp_path / "train.tsv")
    with pytest.raises(ValueError, match="rows=30 is not a whole number of batches of 4"):
        write_training_file(tmp_path / "lt_14k.tsv", rows=30, batch_size=4)
