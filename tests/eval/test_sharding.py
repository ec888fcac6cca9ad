"""Data-parallel greedy evaluation (issue 21, item 2): shards of a benchmark, merged, write one process's bytes.

The reference is an ordinary one-process run of the same config: its ``<bench>.json`` and
``<bench>.predictions.jsonl`` are read as bytes, and the merged files must equal them byte for byte. The one
field that differs between any two runs, ``wall_time_s``, is pinned by a fixed clock in the processes that
write a result (the reference and the merge), or left out of the comparison where the merge runs in a child.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from sparsectx.eval.config import ShardConfig, load_eval_config
from sparsectx.eval.runner import run
from sparsectx.eval.sharding import part_path, resolve_shard, shard_span
from sparsectx.io import read_jsonl
from sparsectx.paths import leaf_dir, predictions_path, result_path

from .test_runner_support import SIDE, base_overrides, build_model_dir, compose_eval, write_bench

ROOT = Path(__file__).resolve().parents[2]
BENCH = "syn_mcq"
ITEMS = 5
SPLIT = ["batch_size=2", "queue_size=2"]
"""Engine calls of 2 items: 3 calls for the 5 items, so two shards get one and two calls."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("model"), "qwen2_5_vl", weights=True)


@pytest.fixture(scope="module")
def tsv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_bench(tmp_path_factory.mktemp("data") / f"{BENCH}.tsv", BENCH, ITEMS, SIDE)


def _overrides(model_dir: Path, results: Path, tsv: Path) -> list[str]:
    return [f"bench={BENCH}", *base_overrides(model_dir, results, {BENCH: tsv}, 6), "budget=0.25", *SPLIT]


def _leaf(results: Path) -> Path:
    return leaf_dir(results, "dev", "tiny", "base", "visionzip", 0.25)


def _outputs(leaf: Path) -> tuple[bytes, bytes]:
    return result_path(leaf, BENCH).read_bytes(), predictions_path(leaf, BENCH).read_bytes()


def _fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pins ``time.perf_counter`` (the runner's wall-time clock) so two runs write the same ``wall_time_s``."""
    monkeypatch.setattr("sparsectx.eval.runner.time.perf_counter", lambda: 0.0)


@pytest.fixture(scope="module")
def results_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Returns the results root of the reference and of every test that merges shards (it is part of the
    config, so the reference's bytes hold only for runs under this root)."""
    return tmp_path_factory.mktemp("sharded") / "results"


@pytest.fixture(scope="module")
def reference(model_dir: Path, tsv: Path, results_root: Path) -> tuple[bytes, bytes]:
    """Returns the one-process run's result and predictions bytes, and removes them from ``results_root``.

    Run once for the module: each test compares with the same config, model and data.
    """
    with pytest.MonkeyPatch.context() as patch:
        _fixed_clock(patch)
        run(compose_eval(_overrides(model_dir, results_root, tsv)))
    reference = _outputs(_leaf(results_root))
    shutil.rmtree(_leaf(results_root))
    return reference


@pytest.fixture
def results(results_root: Path, reference: tuple[bytes, bytes]) -> Iterator[Path]:
    """Returns ``results_root`` as the reference run left it (its leaf removed); the leaf the test writes is
    removed afterwards, so no test finds another's parts or merged files."""
    shutil.rmtree(_leaf(results_root), ignore_errors=True)
    yield results_root
    shutil.rmtree(_leaf(results_root), ignore_errors=True)


def _child_env(threads: int) -> dict[str, str]:
    """The environment of a child ``python src/evaluate.py``: this worktree's code, this process's threads
    (CPU kernels may round differently with another thread count, as two one-process runs would)."""
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": str(threads)}


def test_shards_deal_out_whole_engine_calls_in_order():
    for n_items in range(1, 23):
        for queue in (1, 2, 3, 8):
            calls = -(-n_items // queue)
            chunks = [range(s, min(s + queue, n_items)) for s in range(0, n_items, queue)]  # one process's calls
            for count in range(1, calls + 1):
                spans = [shard_span(n_items, queue, i, count, BENCH) for i in range(count)]
                assert [i for span in spans for i in span] == list(range(n_items))
                for span in spans:
                    assert span.start % queue == 0 and any(span.stop == c.stop for c in chunks)
                sizes = [-(-len(span) // queue) for span in spans]
                assert sum(sizes) == calls and max(sizes) - min(sizes) <= 1


def test_more_shards_than_engine_calls_is_refused_with_the_numbers():
    with pytest.raises(ValueError, match=r"shard.count=4 but its 5 items make only 3 engine calls of queue_size=2"):
        shard_span(5, 2, 0, 4, BENCH)
    with pytest.raises(ValueError, match=r"shard.count=6 but its 5 items.*set shard.count <= 5"):
        shard_span(5, 1, 0, 6, BENCH)


def _shard_cfg(**changes) -> ShardConfig:
    fields = {"count": 1, "index": 0, "from_env": "none", "merge": False, "barrier_timeout_s": 60}
    return ShardConfig(**(fields | changes))


def test_shard_comes_from_torchrun_or_a_slurm_array():
    torchrun = resolve_shard(_shard_cfg(from_env="torchrun"), {"RANK": "3", "WORLD_SIZE": "4"})
    assert (torchrun.index, torchrun.count, torchrun.barrier, torchrun.merge) == (3, 4, True, False)
    array = {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_COUNT": "4"}
    slurm = resolve_shard(_shard_cfg(from_env="slurm"), array)
    assert (slurm.index, slurm.count, slurm.barrier) == (2, 4, False)
    plain = resolve_shard(_shard_cfg(count=3, index=1), {"RANK": "0", "WORLD_SIZE": "8"})
    assert (plain.index, plain.count) == (1, 3)
    with pytest.raises(ValueError, match="WORLD_SIZE=None"):
        resolve_shard(_shard_cfg(from_env="torchrun"), {"RANK": "0"})
    stepped = {**array, "SLURM_ARRAY_TASK_ID": "11"}  # --array=5-11:2 has 4 tasks, ids 5, 7, 9, 11
    with pytest.raises(ValueError, match="shard 6 of 4.*consecutive"):
        resolve_shard(_shard_cfg(from_env="slurm"), stepped)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["shard.count=2", "shard.index=2"], r"shard.index=2 must lie in \[0, shard.count=2\)"),
        (["shard.count=0"], "shard.count must be >= 1"),
        (["shard.merge=true"], "shard.merge=true with shard.count=1"),
        (["shard.merge=true", "shard.from_env=slurm"], "explicit count"),
        (["shard.count=2", "mode=passk"], "only greedy evaluation"),
        (["shard.from_env=mpi"], "shard.from_env='mpi'"),
        (["shard.from_env=torchrun", "shard.count=4"], "takes the shard from the launcher's environment"),
    ],
)
def test_bad_shard_settings_fail_with_the_key(overrides, match):
    with pytest.raises(ValueError, match=match):
        load_eval_config(compose_eval(["logger=none", *overrides]))


@pytest.mark.slow
def test_two_processes_then_a_merge_write_one_process_bytes(model_dir, tsv, reference, results, tmp_path, monkeypatch):
    overrides = _overrides(model_dir, results, tsv)
    env = _child_env(torch.get_num_threads())
    shards = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "src" / "evaluate.py"), *overrides, "shard.count=2", f"shard.index={i}"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for shard in shards:
        stdout, stderr = shard.communicate(timeout=300)
        assert shard.returncode == 0, stderr[-3000:]
    leaf = _leaf(results)
    parts = [part_path(leaf, BENCH, i, 2) for i in range(2)]
    assert [[row["id"] for row in read_jsonl(p)] for p in parts] == [["0", "1"], ["2", "3", "4"]]
    summary = [BENCH, "shard-1-of-2", "-", "3", "items", "generated", str(parts[1])]
    assert summary in [line.split() for line in stdout.splitlines()]  # the last shard's summary line
    assert not result_path(leaf, BENCH).exists()  # a shard scores nothing
    with monkeypatch.context() as patch:
        _fixed_clock(patch)
        merged = run(compose_eval([*overrides, "shard.count=2", "shard.merge=true"]))
    assert merged == [result_path(leaf, BENCH)]
    assert _outputs(leaf) == reference
    assert "shard" not in json.loads(reference[0])["provenance"]["config"]


def _run_shard(model_dir: Path, results: Path, tsv: Path, index: int, *extra: str) -> Path:
    return run(compose_eval([*_overrides(model_dir, results, tsv), "shard.count=2", f"shard.index={index}", *extra]))[0]


@pytest.mark.slow
def test_a_merge_refuses_missing_or_stale_parts_naming_them(model_dir, tsv, tmp_path):
    results = tmp_path / "results"
    merge = compose_eval([*_overrides(model_dir, results, tsv), "shard.count=2", "shard.merge=true"])
    first = _run_shard(model_dir, results, tsv, 0)
    missing = part_path(_leaf(results), BENCH, 1, 2)
    with pytest.raises(ValueError, match="cannot merge shard.count=2 parts") as err:
        run(merge)
    assert f"{missing}: missing; run shard.index=1" in str(err.value)
    second = _run_shard(model_dir, results, tsv, 1, "seed=1")  # another config: another config hash
    assert second == missing
    with pytest.raises(ValueError, match="written by another config") as err:
        run(merge)
    assert str(missing) in str(err.value) and str(first) not in str(err.value)
    lines = first.read_text().splitlines(keepends=True)
    first.write_text(lines[0])  # shard 0 killed before its second item
    with pytest.raises(ValueError, match=r"1 of its 2 items missing \(first ids \['1'\]\)"):
        run(merge)
    assert not result_path(_leaf(results), BENCH).exists() and not predictions_path(_leaf(results), BENCH).exists()
    _run_shard(model_dir, results, tsv, 0)  # the fix the messages name: rerun the shards with this config
    _run_shard(model_dir, results, tsv, 1)
    assert [row["id"] for row in read_jsonl(first)] == ["0", "1"] and first.read_text().startswith(lines[0])
    assert json.loads(run(merge)[0].read_text())["n_scored"] == ITEMS


def test_too_many_shards_fail_before_the_model_loads(model_dir, tsv, tmp_path, monkeypatch):
    def no_model(*_args):
        raise AssertionError("a refused split must not load the model")

    monkeypatch.setattr("sparsectx.eval.runner.load_eval_model", no_model)
    cfg = compose_eval([*_overrides(model_dir, tmp_path, tsv), "shard.count=4", "shard.index=3"])
    with pytest.raises(ValueError, match=f"benchmark '{BENCH}': shard.count=4 but its 5 items make only 3"):
        run(cfg)
    assert not (tmp_path / "dev").exists()


@pytest.mark.slow
def test_torchrun_ranks_merge_after_a_barrier(model_dir, tsv, reference, results, tmp_path):
    overrides = _overrides(model_dir, results, tsv)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(ROOT / "src" / "evaluate.py"),
        *overrides,
        "shard.from_env=torchrun",
    ]
    env = _child_env(torch.get_num_threads())
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result, predictions = _outputs(_leaf(results))
    assert predictions == reference[1]
    got, want = json.loads(result), json.loads(reference[0])
    assert got.pop("wall_time_s") > 0  # the merging rank's own clock; every other byte is the reference's
    want.pop("wall_time_s")
    assert got == want
