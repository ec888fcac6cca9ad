"""``python -m sparsectx.mps``: the study's commands run as clients of a private MPS daemon that is stopped after.

A fake ``nvidia-cuda-mps-control`` on PATH stands in for NVIDIA's: it records each call (arguments, standard
input, the pipe directory it was given) and, like the real one, ``-d`` starts the daemon and ``quit`` on
standard input stops it. The real daemon was exercised on the GPU machine by the study run of
docs/performance.md ("The tiny study on one GPU").
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

FAKE_CONTROL = """#!{python}
import json, os, sys
stdin = "" if "-d" in sys.argv else sys.stdin.read()
record = {{"args": sys.argv[1:], "stdin": stdin, "pipe": os.environ.get("CUDA_MPS_PIPE_DIRECTORY"),
          "log": os.environ.get("CUDA_MPS_LOG_DIRECTORY"),
          "pipe_exists": os.path.isdir(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/nonexistent"))}}
with open({calls!r}, "a") as out:
    out.write(json.dumps(record) + "\\n")
sys.exit({start_rc} if "-d" in sys.argv else 0)
"""

CHILD = "import os, sys; print('PIPE=' + os.environ.get('CUDA_MPS_PIPE_DIRECTORY', '')); sys.exit(7)"

PROBE_OK = "import os; open({out!r}, 'w').write(os.environ.get('CUDA_MPS_PIPE_DIRECTORY', ''))"
"""Stands in for the CUDA client that checks the daemon (this machine may have no GPU): records its pipe."""


def run_wrapper(
    tmp_path: Path,
    *,
    start_rc: int | None = 0,
    env_extra: dict[str, str] | None = None,
    command: list[str] | None = None,
    probe_ok: bool = True,
):
    """Runs ``python -m sparsectx.mps --probe <probe> -- <command>`` (default: ``python -c CHILD``) with a fake
    control program whose ``-d`` exits ``start_rc`` (None: none on PATH) and a probe that succeeds (recording
    its pipe directory in ``probe.txt``) or exits 3; returns the process and the fake's recorded calls."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir()
    if start_rc is not None:
        fake = bin_dir / "nvidia-cuda-mps-control"
        fake.write_text(FAKE_CONTROL.format(python=sys.executable, calls=str(calls), start_rc=start_rc))
        fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    env.update(env_extra or {})
    code = PROBE_OK.format(out=str(tmp_path / "probe.txt")) if probe_ok else "import sys; sys.exit(3)"
    probe = shlex.join([sys.executable, "-c", code])
    done = subprocess.run(
        [sys.executable, "-m", "sparsectx.mps", "--probe", probe, "--", *(command or [sys.executable, "-c", CHILD])],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    recorded = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    return done, recorded


def test_the_command_runs_as_a_client_of_a_private_daemon_which_is_stopped_after(tmp_path: Path) -> None:
    done, calls = run_wrapper(tmp_path)
    assert done.returncode == 7, done.stderr  # the command's own exit status
    child_pipe = done.stdout.split("PIPE=", 1)[1].strip()
    assert [c["args"] for c in calls] == [["-d"], []]
    start, stop = calls
    assert start["pipe"] == child_pipe == stop["pipe"] and start["pipe_exists"], calls
    assert start["log"] and start["log"] != start["pipe"]
    assert (tmp_path / "probe.txt").read_text() == child_pipe, "the probe did not run as the daemon's client"
    assert stop["stdin"].strip() == "quit"
    assert not Path(child_pipe).exists(), "the daemon's temporary directory was left behind"
    assert "started an MPS control daemon" in done.stderr


def test_a_daemon_that_fails_to_start_leaves_the_command_running_without_mps(tmp_path: Path) -> None:
    done, calls = run_wrapper(tmp_path, start_rc=1)
    assert done.returncode == 7
    assert done.stdout.strip() == "PIPE=", "the command was pointed at a daemon that did not start"
    assert [c["args"] for c in calls] == [["-d"]], "a daemon that never started was sent quit"
    assert "exited 1" in done.stderr and "running without MPS" in done.stderr


def test_a_daemon_whose_clients_fail_is_stopped_and_the_command_runs_without_it(tmp_path: Path) -> None:
    done, calls = run_wrapper(tmp_path, probe_ok=False)
    assert done.returncode == 7
    assert done.stdout.strip() == "PIPE=", "the command was pointed at a daemon whose clients fail"
    assert [c["args"] for c in calls] == [["-d"], []] and calls[1]["stdin"].strip() == "quit"
    assert "a CUDA client under it failed" in done.stderr and "exited 3" in done.stderr
    assert not Path(calls[0]["pipe"]).parent.exists(), "the daemon's temporary directory was left behind"


def test_without_the_control_program_the_command_runs_as_it_is(tmp_path: Path) -> None:
    done, calls = run_wrapper(tmp_path, start_rc=None)
    assert done.returncode == 7 and done.stdout.strip() == "PIPE=" and calls == []
    assert "no nvidia-cuda-mps-control on PATH" in done.stderr


def test_a_daemon_already_named_in_the_environment_is_used_and_left_alone(tmp_path: Path) -> None:
    done, calls = run_wrapper(tmp_path, env_extra={"CUDA_MPS_PIPE_DIRECTORY": "/run/theirs"})
    assert done.returncode == 7 and done.stdout.strip() == "PIPE=/run/theirs"
    assert calls == [], "someone else's daemon was started or stopped"


@pytest.mark.parametrize("argv", [[], ["--"], ["--probe", "true", "--"], ["--probe"]])
def test_no_command_is_a_usage_error(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "sparsectx.mps", *argv], capture_output=True, text=True)
    assert done.returncode == 2 and "usage: python -m sparsectx.mps [--probe CMD] -- <command>" in done.stderr


def test_a_command_that_cannot_start_stops_the_daemon_and_returns_127(tmp_path: Path) -> None:
    done, calls = run_wrapper(tmp_path, command=[str(tmp_path / "no-such-program")])
    assert done.returncode == 127 and "cannot run" in done.stderr
    assert [c["args"] for c in calls] == [["-d"], []]
