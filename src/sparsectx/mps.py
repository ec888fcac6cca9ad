"""Runs a command with the one GPU shared through CUDA MPS, as ``make study`` does on a GPU machine.

    python -m sparsectx.mps -- python -m sparsectx.pipeline --profile workflow/profiles/gpu all_tables

The tiny study runs sixteen processes on one GPU. Without MPS the GPU time-slices between their contexts, and
the tiny model's decode steps (short, launch-bound kernels) wait for their turn: on one H200 an evaluation job
took 59 s among sixteen against 27 s alone. With an MPS control daemon the processes' kernels share the GPU
at once: the same job took 27 s among sixteen, and ``tiny_scopd`` finished in about half the time with the
same scores (docs/performance.md, "The tiny study on one GPU").

This module starts a private daemon (its pipe and log directories in a fresh temporary directory, so it
neither needs root nor meets another user's daemon), runs the command as a child with
``CUDA_MPS_PIPE_DIRECTORY`` and ``CUDA_MPS_LOG_DIRECTORY`` set, then stops the daemon and returns the child's
exit status. Before the command it runs a small CUDA client under the daemon (``PROBE``): the daemon starts its
server only for a first client, and a server the driver refuses would otherwise fail every job. Where no
daemon can be had (no ``nvidia-cuda-mps-control`` on PATH, it fails to start, or the probe fails under it) it
says why and runs the command without one: the study is slower, never wrong. Where ``CUDA_MPS_PIPE_DIRECTORY`` is
already set, a daemon is someone else's to manage and the command runs under it as it is.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from sparsectx.foreground import run_in_foreground

CONTROL = "nvidia-cuda-mps-control"
"""The MPS control program (NVIDIA's driver utilities put it on PATH beside ``nvidia-smi``)."""

USAGE = "usage: python -m sparsectx.mps [--probe CMD] -- <command> [args ...]"

PIPE_VAR, LOG_VAR = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"
"""Where the daemon and its clients meet; every CUDA process with the same pipe directory is its client."""

STOP_TIMEOUT_S = 60
"""How long the daemon may take to quit after the command ends (it waits for its clients to exit)."""

PROBE = (sys.executable, "-c", "import torch; torch.ones(1, device='cuda').sum().item()")
"""A CUDA client run before the command: the daemon starts its MPS server only when a first client connects,
so a server the driver refuses (a compute mode, a container's limits) shows only here, not at ``-d``."""

PROBE_TIMEOUT_S = 120
"""How long the probe may take (importing torch and creating a CUDA context)."""


def _say(message: str) -> None:
    print(f"sparsectx.mps: {message}", file=sys.stderr, flush=True)


def _tail(done: subprocess.CompletedProcess) -> str:
    return ((done.stderr or "") + (done.stdout or "")).strip()[-500:]


def _start(program: str, env: dict[str, str]) -> str | None:
    """Starts the daemon with ``env`` (the process environment and the daemon's two directories); returns
    None when it started, else why not."""
    started = subprocess.run([program, "-d"], env=env, capture_output=True, text=True)
    if started.returncode == 0:
        return None
    log = Path(env[LOG_VAR]) / "control.log"
    detail = _tail(started) or (log.read_text()[-500:] if log.exists() else "")
    return f"`{program} -d` exited {started.returncode} ({detail})"


def _probe(probe: Sequence[str], env: dict[str, str]) -> str | None:
    """Runs the CUDA client ``probe`` as the daemon's client; returns None when it worked, else why not."""
    try:
        checked = subprocess.run(list(probe), env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        failure = str(error)
    else:
        if checked.returncode == 0:
            return None
        failure = f"exited {checked.returncode} ({_tail(checked)})"
    return f"the daemon started, but a CUDA client under it failed: `{' '.join(probe)}` {failure}"


def _stop(program: str, env: dict[str, str]) -> bool:
    """Asks the daemon to quit; returns False when it did not within ``STOP_TIMEOUT_S`` (its directory must
    then stay, for the command this prints to reach it)."""
    try:
        stopped = subprocess.run(
            [program], input="quit\n", env=env, capture_output=True, text=True, timeout=STOP_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        _say(
            f"the daemon did not quit within {STOP_TIMEOUT_S} s; stop it with `echo quit | "
            f"{PIPE_VAR}={env[PIPE_VAR]} {program}`"
        )
        return False
    if stopped.returncode != 0:
        _say(f"stopping the daemon exited {stopped.returncode}: {_tail(stopped)}")
    return True


@contextmanager
def mps_daemon(control: str = CONTROL, probe: Sequence[str] = PROBE) -> Iterator[dict[str, str] | None]:
    """Yields the environment variables that make CUDA processes clients of a private MPS daemon.

    Yields None (after saying why) where there is none to use: ``control`` is not on PATH, it exits
    non-zero, ``probe`` (a CUDA client) fails under it (the daemon is then stopped before the block), or
    ``CUDA_MPS_PIPE_DIRECTORY`` is already set (someone else's daemon, used as it is). The daemon is stopped
    and its directory removed when the block ends, however it ends.
    """
    if os.environ.get(PIPE_VAR):
        _say(f"{PIPE_VAR}={os.environ[PIPE_VAR]} is set: the command runs under that daemon, left as it is")
        yield None
        return
    program = shutil.which(control)
    if program is None:
        _say(f"no {control} on PATH: the GPU's processes time-slice it (slower, the same results)")
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="sparsectx-mps-"))
    daemon = {PIPE_VAR: str(root / "pipe"), LOG_VAR: str(root / "log")}
    for path in daemon.values():
        Path(path).mkdir()
    env = {**os.environ, **daemon}
    stopped = True
    reason = _start(program, env)
    if reason is None:
        reason = _probe(probe, env)
        stopped = reason is None or _stop(program, env)
    if reason is not None:
        _say(f"{reason}: running without MPS (slower, the same results)")
        if stopped:
            shutil.rmtree(root, ignore_errors=True)
        yield None
        return
    _say(f"started an MPS control daemon ({PIPE_VAR}={daemon[PIPE_VAR]})")
    try:
        yield daemon
    finally:
        if _stop(program, env):
            shutil.rmtree(root, ignore_errors=True)


def run_shared(command: Sequence[str], control: str = CONTROL, probe: Sequence[str] = PROBE) -> int:
    """Runs ``command`` under a private MPS daemon (or without one, as ``mps_daemon`` says) and returns its
    exit status.

    The command runs in the foreground (``sparsectx.foreground``: Ctrl-C reaches it directly, a SIGTERM or
    SIGHUP to this process is passed on), so it stops as it would alone (Snakemake finishing its bookkeeping)
    before the daemon goes. A command that cannot be started returns 127.
    """
    with mps_daemon(control, probe) as env:
        try:
            return run_in_foreground(command, {**os.environ, **(env or {})})
        except OSError as error:
            _say(f"cannot run {command[0]!r}: {error}")
            return 127


def main(argv: Sequence[str] | None = None) -> int:
    """Parses ``[--probe CMD] [--] command ...`` and runs the command shared; exits 2 with the usage when no
    command is given. ``--probe`` replaces the CUDA client that checks the daemon (a shell-quoted string)."""
    args = list(sys.argv[1:] if argv is None else argv)
    probe: Sequence[str] = PROBE
    if args[:1] == ["--probe"] and len(args) > 1:
        probe, args = shlex.split(args[1]), args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args or args[0] == "--probe":
        print(USAGE, file=sys.stderr)
        return 2
    return run_shared(args, probe=probe)


if __name__ == "__main__":
    sys.exit(main())
