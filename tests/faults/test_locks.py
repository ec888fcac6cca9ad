"""Locks and private run directories (issue 39): one writer per run directory and per evaluation output.

A second trainer of a run directory, or a second evaluation of a benchmark's outputs, is refused at once with an
error naming the lock file, the holder and the fix, before it reads or writes anything; the lock goes when its
job ends, however it ends; a dead holder's lock on this host is taken over with a warning, another host's never.
Run directories are private (0700) unless ``run_dir_permissions=umask``; a resume state in a run directory
that other users can write is refused.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from eval.test_runner_support import SIDE, base_overrides, build_model_dir, compose_eval, write_bench
from training.test_loop_support import TinyEnv, compose_train, shared_env, train_overrides

from sparsectx import locks
from sparsectx.eval.runner import run as evaluate
from sparsectx.paths import leaf_dir, result_path
from sparsectx.training import loop

pytestmark = pytest.mark.faults
PYTHON = sys.executable
HOLDER = """
import sys, time
from pathlib import Path
from sparsectx.locks import exclusive
with exclusive(Path(sys.argv[1]), "training run", "the directory under test"):
    print("held", flush=True)
    time.sleep(120)
"""


@contextmanager
def held_by_another_process(path: Path) -> Iterator[subprocess.Popen[str]]:
    """Yields a live process of this host holding the lock file ``path``; kills it (SIGKILL) afterwards."""
    holder = subprocess.Popen([PYTHON, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def dead_pid() -> int:
    """Returns the pid of a process of this host that has exited."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def write_lock(path: Path, **owner: object) -> bytes:
    """Returns the bytes of a lock file written at ``path`` naming the holder ``owner`` (over a default one)."""
    record = {
        "purpose": "evaluation",
        "user": "alice",
        "host": socket.gethostname(),
        "pid": dead_pid(),
        "process_start": None,
        "boot_id": None,
        "command": "python src/evaluate.py",
        "started": "2026-01-02T03:04:05+00:00",
        **owner,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path.read_bytes()


# ---- the lock itself -------------------------------------------------------------------------------------------
def test_a_second_holder_is_refused_at_once_naming_the_holder_and_the_fix(tmp_path: Path) -> None:
    lock = tmp_path / "run" / "train.lock"
    with held_by_another_process(lock) as holder:
        before = lock.read_bytes()
        started = time.monotonic()
        with pytest.raises(locks.LockHeldError) as refused:
            locks.acquire(lock, "training run", "the run directory run/")
        assert time.monotonic() - started < 2.0  # refused at once, not after a wait
        message = str(refused.value)
        host, user = socket.gethostname(), json.loads(before)["user"]
        assert f"{lock} is held by a running training run of user {user} on host {host}, pid {holder.pid}" in message
        assert "started 20" in message and f"kill {holder.pid}" in message and f"remove {lock}" in message
        assert lock.read_bytes() == before  # the holder's lock untouched


def test_a_killed_holders_lock_is_taken_over_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lock = tmp_path / "train.lock"
    with held_by_another_process(lock) as holder:
        pid = holder.pid
    assert lock.is_file()  # SIGKILL left it
    with caplog.at_level(logging.WARNING, logger="sparsectx.locks"), locks.exclusive(lock, "training run", "x"):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert any(
        f"taking over the stale lock {lock}" in r.getMessage() and f"pid {pid}" in r.getMessage()
        for r in caplog.records
    )
    assert not lock.exists()


def test_the_lock_is_released_however_the_block_ends(tmp_path: Path) -> None:
    lock = tmp_path / "leaf" / "syn_count.lock"
    with pytest.raises(ValueError, match="inside"), locks.exclusive(lock, "evaluation", "x"):
        assert lock.is_file()
        raise ValueError("inside")
    assert not lock.exists()
    with locks.exclusive(lock, "evaluation", "x"):  # free again
        pass


def test_a_pid_now_used_by_another_process_is_not_a_live_holder(tmp_path: Path) -> None:
    lock = tmp_path / "train.lock"
    start = locks.process_start(os.getpid())
    assert start is not None
    write_lock(lock, pid=os.getpid(), process_start=start - 1)  # this pid, but a process started earlier
    with locks.exclusive(lock, "training run", "x"):
        assert json.loads(lock.read_text())["process_start"] == start


def test_a_lock_from_another_host_is_never_taken_over(tmp_path: Path) -> None:
    lock = tmp_path / "train.lock"
    written = write_lock(lock, host="gpu-node-17", pid=4242)
    with pytest.raises(locks.LockHeldError) as refused:
        locks.acquire(lock, "training run", "the run directory x")
    message = str(refused.value)
    assert "on host gpu-node-17, pid 4242" in message and "never taken over" in message
    assert "ssh gpu-node-17 ps -p 4242" in message and f"rm {lock}" in message
    assert lock.read_bytes() == written


def test_a_lock_file_naming_no_holder_is_left_alone(tmp_path: Path) -> None:
    lock = tmp_path / "syn_count.lock"
    lock.write_text("")
    with pytest.raises(locks.LockHeldError, match=rf"{lock} exists but names no holder.*rm {lock}"):
        locks.acquire(lock, "evaluation", "x")
    assert lock.read_text() == ""


def test_two_jobs_finding_one_stale_lock_cannot_both_take_it(tmp_path: Path) -> None:
    import fcntl

    lock = tmp_path / "train.lock"
    write_lock(lock)  # a dead holder of this host: stale
    with open(lock, "rb") as other:  # another job is taking it over right now: it holds the file's flock
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(locks.LockHeldError, match="no longer runs, but the lock cannot be taken over"):
            locks.acquire(lock, "training run", "x")
    with locks.exclusive(lock, "training run", "x"):  # that job let go: now it can be taken
        pass


# ---- training and evaluation hold them -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    return shared_env(tmp_path_factory)


RUN_LOCK = "train.lock"


def one_step(env: TinyEnv, root: Path, *extra: str):  # noqa: ANN201
    return compose_train([*train_overrides(env, root), "method=sft", "steps=1", *extra])


def test_a_second_trainer_of_a_run_directory_is_refused_before_it_writes(tiny_env, tmp_path: Path) -> None:  # noqa: ANN001
    cfg = one_step(tiny_env, tmp_path)
    out = tmp_path / "dev" / "tiny" / "sft" / "visionzip" / "0.1"
    with held_by_another_process(out / RUN_LOCK) as holder:
        with pytest.raises(locks.LockHeldError, match=rf"{out / RUN_LOCK} is held by .* pid {holder.pid}"):
            loop.run(cfg)
        assert sorted(p.name for p in out.iterdir()) == [RUN_LOCK]  # no config.yaml, no state
    done = loop.run(cfg)  # the holder is gone (killed): its lock is stale and taken over
    assert done.run_dir == out and (out / "checkpoint" / "config.json").is_file()
    assert not (out / RUN_LOCK).exists()  # released at the end


BENCH = "syn_count"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("model"), "qwen2_5_vl", weights=True)


def test_a_second_evaluation_of_a_benchmark_is_refused_and_other_benchmarks_are_not(model_dir, tmp_path) -> None:  # noqa: ANN001
    tsv = write_bench(tmp_path / f"{BENCH}.tsv", BENCH, 2, SIDE)
    results = tmp_path / "results"
    cfg = compose_eval([f"bench={BENCH}", *base_overrides(model_dir, results, {BENCH: tsv}, 4), "budget=0.25"])
    leaf = leaf_dir(results, "dev", "tiny", "base", "visionzip", 0.25)
    with held_by_another_process(leaf / f"{BENCH}.lock") as holder:
        with pytest.raises(locks.LockHeldError, match=rf"{leaf / BENCH}.lock is held by .* pid {holder.pid}"):
            evaluate(cfg)
        assert sorted(p.name for p in leaf.iterdir()) == [f"{BENCH}.lock"]  # no predictions, no result
    with held_by_another_process(leaf / "syn_ocr.lock"):  # another benchmark of the leaf: a parallel job
        (out,) = evaluate(cfg)
    assert out == result_path(leaf, BENCH) and json.loads(out.read_text())["n_scored"] == 2
    assert not (leaf / f"{BENCH}.lock").exists()


# ---- private run directories ----------------------------------------------------------------------------------
def test_run_directories_are_private_unless_configured_otherwise(tiny_env, tmp_path: Path) -> None:  # noqa: ANN001
    private, shared = tmp_path / "private", tmp_path / "shared"
    out = private / "dev" / "tiny" / "sft" / "visionzip" / "0.1"
    out.mkdir(parents=True, mode=0o755)  # as Hydra and Snakemake create it, before training starts
    out.chmod(0o755)
    assert stat.S_IMODE(loop.run(one_step(tiny_env, private)).run_dir.stat().st_mode) == 0o700
    umask = os.umask(0o022)
    try:
        done = loop.run(one_step(tiny_env, shared, "run_dir_permissions=umask"))
    finally:
        os.umask(umask)
    assert stat.S_IMODE(done.run_dir.stat().st_mode) == 0o755


def test_a_resume_state_in_a_run_directory_others_can_write_is_refused(tiny_env, tmp_path: Path) -> None:  # noqa: ANN001
    cfg = one_step(tiny_env, tmp_path)
    out = loop.run(cfg).run_dir
    out.chmod(0o775)  # a group member could have replaced state/ meanwhile
    state = {p: p.read_bytes() for p in (out / "state").iterdir()}
    refusal = rf"{out} is writable by other users \(mode 775\).*chmod 700 {out}.*run_dir_permissions=umask"
    with pytest.raises(PermissionError, match=refusal):
        loop.run(cfg)
    assert {p: p.read_bytes() for p in (out / "state").iterdir()} == state
    loop.run(one_step(tiny_env, tmp_path, "run_dir_permissions=umask"))  # shared on purpose: accepted
