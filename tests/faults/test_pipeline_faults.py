"""Pipeline and file-writing faults (issue 13, findings 6-9): prebuilt data, a killed pipeline's lock, file
modes, full disks, a bad budget, and the rules' logs.

Snakemake runs as a subprocess on a temporary working directory (``--directory``), as in tests/workflow/.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from faults.full_disk import full_disk
from sparsectx import io
from sparsectx import workflow as wf
from sparsectx.paths import budget_tag

pytestmark = pytest.mark.faults

ROOT = wf.REPO_DIR
PYTHON = sys.executable
BENCH = "syn_count"
REDUCED = {
    "experiment": "tiny",
    "grid": {
        "pruners": {"visionzip": {}},
        "benchmarks": {BENCH: {}},
        "methods": {},
        "tables": {
            "main": {
                "models": ["tiny"],
                "benchmarks": [BENCH],
                "rows": [{"methods": ["base"], "pruners": ["visionzip"], "budgets": [0.1]}],
            }
        },
        "passk": None,
        "efficiency": None,
    },
    "hydra_overrides": {
        "build_data": [
            *(f"data.benches.{b}.size=12" for b in wf.load_yaml(wf.CONF_DIR / "data/tiny.yaml")["benches"]),
            "data.train.size=12",
        ],
        "evaluate": [f"bench.{BENCH}.max_new_tokens=24"],
    },
}
LEAF = f"results/tiny/tiny/base/visionzip/0.1/{BENCH}.json"


def demo_entry() -> list[str]:
    """Returns the command ``make demo`` starts Snakemake with, up to its arguments (``$(BIN)`` = the venv)."""
    recipe = (ROOT / "Makefile").read_text().split("\ndemo:")[1].split("\n\t", 1)[1].split("\n")[0]
    words = shlex.split(recipe.split("&&")[-1].replace("$(BIN)", str(Path(PYTHON).parent)))
    return words[: words.index("--profile")]


def snakemake(workdir: Path, *args: str, entry: list[str] | None = None) -> list[str]:
    """Returns a command running ``args`` on ``workdir`` (default entry: ``python -m snakemake``)."""
    head = entry or [PYTHON, "-m", "snakemake"]
    return [*head, "--directory", str(workdir), "--workflow-profile", "none", "--cores", "1", *args]


# ---- finding 6: data built by hand is not the pipeline's ----------------------------------------------------
def test_prebuilt_data_never_stands_in_for_the_pipeline_data_job(tmp_path: Path) -> None:
    # the README's `python src/build_data.py`, here at another size (the full suite has 100 items each)
    sizes = [f"data.benches.{b}.size=6" for b in wf.load_yaml(wf.CONF_DIR / "data/tiny.yaml")["benches"]]
    built = subprocess.run(
        [PYTHON, str(ROOT / "src/build_data.py"), *sizes, "data.train.size=6"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / f"data/tiny/{BENCH}.tsv").is_file()
    config = tmp_path / "reduced.yaml"
    config.write_text(yaml.safe_dump(REDUCED))
    cmd = snakemake(tmp_path, "--snakefile", str(ROOT / "Snakefile"), "--configfile", str(config), "-n", "-p", LEAF)
    dry = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "build_data.py" in dry.stdout, "the pipeline's data job was skipped for data built by hand"
    data_dir = wf.Grid("tiny", wf.resolve_config(REDUCED)["grid"], REDUCED["hydra_overrides"]).data_dir()
    assert data_dir != "data/tiny"
    assert f"bench.{BENCH}.path={data_dir}/{BENCH}.tsv" in dry.stdout  # the evaluation reads the job's data


def test_the_data_folder_is_keyed_by_the_build_overrides() -> None:
    grid = wf.resolve_config(REDUCED)["grid"]
    reduced = wf.Grid("tiny", grid, REDUCED["hydra_overrides"]).data_dir()
    other = wf.Grid("tiny", grid, {"build_data": ["data.train.size=7"]}).data_dir()
    assert reduced != other and reduced == wf.Grid("tiny", grid, REDUCED["hydra_overrides"]).data_dir()


# ---- finding 7: a killed pipeline's lock ----------------------------------------------------------------------
SLEEPER = """
rule all:
    input: "b.txt"
rule a:
    output: "a.txt"
    shell: "sleep {config[sleep]}; touch {output}"
rule b:
    input: "a.txt"
    output: "b.txt"
    shell: "touch {output}"
"""


@pytest.mark.slow
def test_a_killed_pipeline_restarts_through_the_demo_entry_without_unlock(tmp_path: Path) -> None:
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(SLEEPER)
    entry = demo_entry()
    job = subprocess.Popen(
        snakemake(tmp_path, "--snakefile", str(snakefile), "--config", "sleep=60", entry=entry),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    locks = tmp_path / ".snakemake" / "locks"
    deadline = time.monotonic() + 60
    while not any(locks.glob("*.lock")) and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert any(locks.glob("*.lock")), "snakemake took no lock before the deadline"
    os.killpg(job.pid, signal.SIGKILL)  # the whole group, as a lost node or `kill -9` would
    job.wait()
    assert any(locks.glob("*.lock")), "the kill left no lock: nothing to test"
    assert any(locks.glob("sparsectx-entry.*.json")), "the entry recorded no host beside the lock"
    again = subprocess.run(
        snakemake(tmp_path, "--snakefile", str(snakefile), "--config", "sleep=0", "--rerun-incomplete", entry=entry),
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = again.stdout + again.stderr
    assert "LockException" not in output and "cannot be locked" not in output, output[-3000:]
    assert again.returncode == 0, output[-3000:]
    assert (tmp_path / "b.txt").is_file()
    assert "stale lock" in output and "--unlock" in output  # says what it did, and the command
    # a run that ends removes its lock and its record
    left = {path.name: path.read_text() for path in locks.glob("*")} if locks.exists() else {}
    assert not left, f"killed run: pid {job.pid}; left in {locks}: {left}"


def test_a_lock_held_by_a_live_snakemake_is_left_alone(tmp_path: Path) -> None:
    from sparsectx import pipeline

    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text("")
    # a process named snakemake working in that directory (a stand-in that only sleeps)
    holder = subprocess.Popen(["snakemake", "60"], executable=shutil.which("sleep"), cwd=tmp_path)
    try:
        deadline = time.monotonic() + 10
        while not pipeline.snakemake_processes(tmp_path.resolve()) and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(RuntimeError, match=rf"locked by a running snakemake \(pid {holder.pid}: snakemake 60\)"):
            pipeline.clear_stale_lock(["--directory", str(tmp_path)], [PYTHON, "-m", "snakemake"])
    finally:
        holder.kill()
        holder.wait()
    assert (locks / "0.input.lock").is_file()
    (tmp_path / "Snakefile").write_text(SLEEPER)
    record_entry_run(tmp_path)  # the lock was left by a killed run of the entry on this host
    args = [
        "--snakefile",
        str(tmp_path / "Snakefile"),
        "--directory",
        str(tmp_path),
        "--config",
        "sleep=0",
        "-n",
    ]
    done = subprocess.run([PYTHON, "-m", "sparsectx.pipeline", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]  # stale now: removed, then the run starts
    assert "removed the stale lock" in done.stderr
    assert not any(locks.glob("*.lock"))


def dead_pid() -> int:
    """Returns the pid of a process of this host that has exited."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def record_entry_run(workdir: Path, host: str | None = None, pid: int | None = None) -> Path:
    """Returns the record that ``make demo``'s entry leaves beside the lock of a killed run in ``workdir``: by
    default a run of this host whose process has exited."""
    owner = {
        "purpose": "snakemake run",
        "user": "alice",
        "host": host or socket.gethostname(),
        "pid": pid or dead_pid(),
        "process_start": None,
        "boot_id": None,
        "command": "python -m snakemake all_tables",
        "started": "2026-01-02T03:04:05+00:00",
    }
    path = workdir / ".snakemake" / "locks" / f"sparsectx-entry.{owner['host']}.{owner['pid']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(owner))
    return path


def started(pid: int, deadline_s: float = 10.0) -> None:
    """Returns None once process ``pid`` runs its own command line (after exec), or fails at the deadline."""
    deadline = time.monotonic() + deadline_s
    while b"snakemake" not in Path(f"/proc/{pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, f"pid {pid} did not start"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("argv", "where"),
    [
        (["-u", "-m", "snakemake", "all"], "workdir"),  # an interpreter option before -m
        (["-X", "utf8", "-m", "snakemake", "--directory", "work"], "parent"),  # still starting, or a wrapper
    ],
    ids=["python-u-m-snakemake", "directory-from-elsewhere"],
)
def test_a_live_snakemake_however_started_keeps_its_lock_and_a_dead_one_does_not(
    tmp_path: Path, argv: list[str], where: str
) -> None:
    from sparsectx import pipeline

    work = tmp_path / "work"
    locks = work / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text("")
    fake = tmp_path / "fake" / "snakemake"  # `python -m snakemake` that only sleeps (PYTHONPATH comes first)
    fake.mkdir(parents=True)
    (fake / "__main__.py").write_text("import time\ntime.sleep(60)\n")
    (work / "Snakefile").write_text(SLEEPER)  # so that `--unlock` under the live run would succeed
    env = {**os.environ, "PYTHONPATH": str(fake.parent)}
    cwd = work if where == "workdir" else tmp_path
    holder = subprocess.Popen([PYTHON, *argv], cwd=cwd, env=env)
    args = ["--snakefile", str(work / "Snakefile"), "--directory", str(work), "--config", "sleep=0"]
    try:
        started(holder.pid)
        live = rf"{work} is locked by a running snakemake \(pid {holder.pid}: {re.escape(PYTHON)} {argv[0]}.*kept"
        with pytest.raises(RuntimeError, match=live):
            pipeline.clear_stale_lock(args, [PYTHON, "-m", "snakemake"])
        assert (locks / "0.input.lock").is_file()
    finally:
        holder.kill()
        holder.wait()
    record_entry_run(work)  # left by the killed run of the entry on this host
    message = pipeline.clear_stale_lock(args, [PYTHON, "-m", "snakemake"])  # dead now: the lock is stale
    assert message is not None and "removed the stale lock" in message
    assert not any(locks.glob("*.lock"))


def test_a_lock_not_recorded_or_recorded_on_another_host_is_kept(tmp_path: Path) -> None:
    from sparsectx import pipeline

    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text("")
    (tmp_path / "Snakefile").write_text(SLEEPER)
    args = ["--snakefile", str(tmp_path / "Snakefile"), "--directory", str(tmp_path), "--config", "sleep=0"]
    snakemake = [PYTHON, "-m", "snakemake"]
    with pytest.raises(RuntimeError, match=r"no record says which host took the lock.*kept.*--unlock"):
        pipeline.clear_stale_lock(args, snakemake)  # a snakemake started without the entry, on any host
    elsewhere = record_entry_run(tmp_path, host="login-2", pid=4242)
    with pytest.raises(RuntimeError, match=r"on host login-2, pid 4242.*another host's processes cannot be seen"):
        pipeline.clear_stale_lock(args, snakemake)
    assert (locks / "0.input.lock").is_file() and elsewhere.is_file()
    elsewhere.unlink()  # that run has ended after all: only this host's killed run remains
    record_entry_run(tmp_path)
    message = pipeline.clear_stale_lock(args, snakemake)
    assert message is not None and "removed the stale lock" in message
    assert not any(locks.glob("*"))


def fake_process(proc: Path, pid: int, cmdline: str | None, cwd: Path | None) -> None:
    """Writes ``proc/<pid>`` as Linux shows a process; None: that part cannot be read (as another user's)."""
    entry = proc / str(pid)
    entry.mkdir(parents=True)
    if cmdline is None:
        (entry / "cmdline").mkdir()  # reading it fails
    else:
        (entry / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
    if cwd is None:
        (entry / "cwd").write_text("")  # not a link: reading it fails
    else:
        (entry / "cwd").symlink_to(cwd)


def test_processes_that_cannot_be_inspected_keep_the_lock(tmp_path: Path) -> None:
    from sparsectx import pipeline

    work, proc = tmp_path / "work", tmp_path / "proc"
    (work / ".snakemake" / "locks").mkdir(parents=True)
    (work / ".snakemake" / "locks" / "0.input.lock").write_text("")
    record_entry_run(work)
    fake_process(proc, 4242, "python -m snakemake all_tables", None)  # another user's: cwd unreadable
    fake_process(proc, 4343, None, None)  # nothing readable (/proc mounted with hidepid)
    fake_process(proc, 4444, "bash", None)  # readable enough: no snakemake
    fake_process(proc, 4545, "snakemake all_tables", tmp_path)  # a snakemake working elsewhere
    held = pipeline.snakemake_processes(work, proc)
    assert held is not None and sorted(held) == [4242, 4343]
    assert "working directory" in (held[4242].unseen or "") and "command line" in (held[4343].unseen or "")
    unseen = (
        r"could not be inspected.*pid 4242 \(python -m snakemake all_tables\): its working directory.*"
        r"pid 4343 \(\?\): its command line.*--unlock"
    )
    with pytest.raises(RuntimeError, match=unseen):
        pipeline.clear_stale_lock(["--directory", str(work)], [PYTHON, "-m", "snakemake"], proc)
    assert (work / ".snakemake" / "locks" / "0.input.lock").is_file()


def test_wrappers_of_this_entry_and_runs_elsewhere_do_not_hold_the_lock(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = subprocess.Popen(["snakemake", "60"], executable=shutil.which("sleep"), cwd=elsewhere)
    try:
        started(other.pid)
        probe = "from sparsectx import pipeline as p; print(sorted(p.snakemake_processes(p.Path.cwd())))"
        wrapper = f"{shlex.quote(PYTHON)} -c {shlex.quote(probe)}; true"  # `; true`: bash stays the parent
        done = subprocess.run(
            ["bash", "-c", wrapper, "run-snakemake.sh"], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
    finally:
        other.kill()
        other.wait()
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"  # neither the wrapping shell nor a snakemake working elsewhere


# ---- finding 8: errors that name the key or the file ---------------------------------------------------------
@pytest.mark.parametrize("script", ["train.py", "evaluate.py"])
def test_a_non_numeric_budget_names_the_key_the_value_and_the_fix(tmp_path: Path, script: str) -> None:
    run = subprocess.run(
        [PYTHON, str(ROOT / "src" / script), "budget=abc"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert run.returncode != 0
    assert "budget='abc' is not a number" in run.stderr and "e.g. budget=0.1" in run.stderr, run.stderr[-2000:]


def test_budget_tag_keeps_the_path_spelling() -> None:
    assert [budget_tag(b) for b in (0.1, 1.0, 1, "0.05", "1.0")] == ["0.1", "1", "1", "0.05", "1"]
    for bad in ("abc", "nan", None, True):
        with pytest.raises(ValueError, match="is not a number"):
            budget_tag(bad)


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_a_full_disk_names_the_result_file_and_leaves_the_old_one(tmp_path: Path, monkeypatch, where: str) -> None:
    path = tmp_path / "leaf" / "syn_count.json"
    io.atomic_write_json(path, {"score": 50.0})
    full_disk(monkeypatch, where, 10)
    expected = rf"No space left on device while writing {re.escape(str(path))}.*free space"
    with pytest.raises(OSError, match=expected) as caught:
        io.atomic_write_json(path, {"score": 75.0, "rows": list(range(100))})
    assert caught.value.errno == errno.ENOSPC
    assert json.loads(path.read_text()) == {"score": 50.0}  # the old, complete file
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary left


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_a_full_disk_during_an_append_keeps_only_whole_earlier_rows(tmp_path: Path, monkeypatch, where: str) -> None:
    path = tmp_path / "syn_count.predictions.jsonl"
    io.append_jsonl(path, [{"id": 0}])
    before = path.read_bytes()
    full_disk(monkeypatch, where, 12)
    with pytest.raises(OSError, match=rf"No space left on device while writing {re.escape(str(path))}"):
        io.append_jsonl(path, [{"id": 1, "text": "x" * 50}, {"id": 2}])
    assert path.read_bytes() == before
    assert io.read_jsonl(path) == [{"id": 0}]


# ---- finding 9: file modes and logs ---------------------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_results_files_get_the_users_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        io.atomic_write_json(tmp_path / "r.json", {"a": 1})
        io.atomic_write_text(tmp_path / "r.jsonl", "{}\n")
        io.append_jsonl(tmp_path / "p.jsonl", [{"a": 1}])
    finally:
        os.umask(old)
    for name in ("r.json", "r.jsonl", "p.jsonl"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name


@pytest.mark.slow
def test_a_pipeline_leaf_is_readable_by_others_and_its_logs_hold_the_output(tmp_path: Path) -> None:
    config = tmp_path / "reduced.yaml"
    config.write_text(yaml.safe_dump(REDUCED))
    cmd = snakemake(tmp_path, "--snakefile", str(ROOT / "Snakefile"), LEAF, "--configfile", str(config))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    log = tmp_path / wf.mirror(wf.RESULT_PATTERN, "logs", "evaluate", ".log").format(
        experiment="tiny", model="tiny", method="base", pruner="visionzip", budget="0.1", bench=BENCH
    )
    assert LEAF in log.read_text()  # evaluate.py prints each result path last
    data_log = next((tmp_path / "logs" / "build_data").glob("*.log"))
    assert f"{BENCH}.tsv (12 items)" in data_log.read_text()
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / LEAF).stat().st_mode) == 0o666 & ~umask  # the result JSON, too


@pytest.mark.parametrize("leaves_lock", [False, True], ids=["lock-removed", "lock-left"])
def test_the_entry_removes_its_record_when_snakemake_ends_without_its_lock(tmp_path: Path, leaves_lock: bool) -> None:
    from sparsectx import pipeline

    locks = tmp_path / ".snakemake" / "locks"
    # stands in for Snakemake: it ends keeping its lock folder (the record in it), with or without a lock file
    leave = f"open({str(locks / '0.input.lock')!r}, 'w').close()" if leaves_lock else "pass"
    status = pipeline.run_recorded(["--directory", str(tmp_path)], [sys.executable, "-c", leave])
    assert status == 0
    records = sorted(locks.glob(pipeline.RECORD_GLOB))
    if leaves_lock:  # the next run needs it to tell that the lock is stale
        assert len(records) == 1 and json.loads(records[0].read_text())["pid"] == os.getpid()
    else:
        assert records == []
