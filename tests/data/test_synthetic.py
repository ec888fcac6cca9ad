"""Determinism, seeding and train/benchmark disjointness of the synthetic suite."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sparsectx.data.synthetic import build_suite, generate_bench, generate_train
from sparsectx.data.tsv import read_tsv
from sparsectx.seeding import derive_seed

from .conftest import BENCHES, SMALL_BENCH, SMALL_TRAIN, small_suite_config


def test_writes_every_bench_and_train(small_suite) -> None:
    cfg, report = small_suite
    assert set(report.files) == {*BENCHES, "train"}
    for name, path in report.files.items():
        items, skips = read_tsv(path)
        assert skips == []
        assert len(items) == report.sizes[name] == (SMALL_TRAIN if name == "train" else SMALL_BENCH)
        assert [item.index for item in items] == list(range(len(items)))


def test_same_seed_gives_byte_identical_files(small_suite, tmp_path: Path) -> None:
    _, first = small_suite
    second = build_suite(small_suite_config(tmp_path, 0))
    for name, path in first.files.items():
        assert path.read_bytes() == second.files[name].read_bytes(), name


def test_different_seed_changes_every_file(small_suite, tmp_path: Path) -> None:
    _, first = small_suite
    other = build_suite(small_suite_config(tmp_path, 1))
    for name, path in first.files.items():
        assert path.read_bytes() != other.files[name].read_bytes(), name


def test_train_is_disjoint_from_every_bench_by_content_hash(small_suite) -> None:
    _, report = small_suite
    train = {item.content_hash() for item in read_tsv(report.files["train"])[0]}
    assert len(train) == SMALL_TRAIN
    for bench in BENCHES:
        bench_hashes = {item.content_hash() for item in read_tsv(report.files[bench])[0]}
        assert not train & bench_hashes, bench


def test_train_drops_and_counts_an_item_equal_to_a_bench_item(small_suite) -> None:
    cfg, _ = small_suite
    small = replace(cfg, train=replace(cfg.train, size=3))
    items, dropped = generate_train(small, set())
    assert dropped == 0
    first_hash = items[0].content_hash()
    again, dropped = generate_train(small, {first_hash})
    assert dropped == 1
    assert first_hash not in {item.content_hash() for item in again}
    assert again[0].question == items[1].question and again[0].image_bytes == items[1].image_bytes


def test_train_uses_the_training_only_family_and_benches_never_do(small_suite) -> None:
    _, report = small_suite
    assert "describe" in {item.family for item in read_tsv(report.files["train"])[0]}
    for bench in BENCHES:
        assert "describe" not in {item.family for item in read_tsv(report.files[bench])[0]}


def test_bench_rows_do_not_depend_on_bench_size(small_suite) -> None:
    cfg, _ = small_suite
    shorter = replace(cfg, benches={"syn_count": replace(cfg.benches["syn_count"], size=5)})
    long_items, _ = generate_bench(cfg, "syn_count")
    short_items, _ = generate_bench(shorter, "syn_count")
    assert short_items == long_items[:5]


def test_derive_seed_is_stable_and_seed_zero_counts() -> None:
    assert derive_seed(0, "syn_count", 3) == derive_seed(0, "syn_count", 3)
    assert derive_seed(0, "syn_count", 3) != derive_seed(1, "syn_count", 3)
    assert derive_seed(0, "syn_count", 3) != derive_seed(0, "syn_count", 4)
    assert 0 <= derive_seed(0) < 2**63
    for bad in (None, True, 1.5, "0"):
        with pytest.raises(ValueError, match="must be an int"):
            derive_seed(bad)  # type: ignore[arg-type]
