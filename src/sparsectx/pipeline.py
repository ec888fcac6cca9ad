"""Runs Snakemake as ``make demo`` does, first clearing a lock that a killed run left behind.

    python -m sparsectx.pipeline --profile workflow/profiles/local all_tables     # what `make demo` runs

Snakemake locks its working directory (``.snakemake/locks/``) while it runs and removes the lock when it
exits; a SIGKILL (or a lost node) leaves the lock, and every later run stops with ``LockException`` until
``snakemake --unlock``. A lock is stale when no live Snakemake process works in that directory: then it is
removed (with the command that does so printed) and the run starts. When one is running, nothing is touched
and the message says which process holds it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

PROC = Path("/proc")
"""Where live processes are listed (Linux); elsewhere a stale lock is named, not removed."""


def workdir_of(args: Sequence[str]) -> Path:
    """Returns the working directory Snakemake would use for ``args`` (``--directory``/``-d``, else cwd)."""
    for i, arg in enumerate(args):
        if arg in ("--directory", "-d") and i + 1 < len(args):
            return Path(args[i + 1]).resolve()
        if arg.startswith("--directory="):
            return Path(arg.split("=", 1)[1]).resolve()
    return Path.cwd().resolve()


def lock_files(workdir: Path) -> list[Path]:
    """Returns the lock files Snakemake holds (or left behind) in ``workdir``, sorted."""
    return sorted((workdir / ".snakemake" / "locks").glob("*.lock"))


def snakemake_pids(workdir: Path, proc: Path = PROC) -> list[int] | None:
    """Returns the ids of live Snakemake processes working in ``workdir``; None if processes cannot be listed.

    A process counts when its command line names snakemake and its current directory is ``workdir``
    (Snakemake changes into its ``--directory`` before locking).
    """
    if not proc.is_dir():
        return None
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = Path(os.readlink(entry / "cwd")).resolve()
        except OSError:  # gone meanwhile, or another user's process
            continue
        # `python -m snakemake ...`, or a `bin/snakemake` script (the kernel runs `python bin/snakemake ...`)
        if cwd == workdir and any(os.path.basename(part) == b"snakemake" for part in cmdline[:3]):
            pids.append(int(entry.name))
    return sorted(pids)


def clear_stale_lock(args: Sequence[str], snakemake: Sequence[str]) -> str | None:
    """Returns a message after removing a stale lock of the run ``args`` describes; None if there is none.

    Args:
        args: The Snakemake arguments of the run (targets, ``--profile``, ``--directory``, ...).
        snakemake: The command that starts Snakemake (``[python, "-m", "snakemake"]``).

    Raises:
        RuntimeError: The lock is held by a live Snakemake process, or processes cannot be listed; the
            message names the directory, the process and what to do.
    """
    workdir = workdir_of(args)
    locks = lock_files(workdir)
    if not locks:
        return None
    unlock = [*snakemake, *args, "--unlock"]
    pids = snakemake_pids(workdir)
    if pids is None:
        raise RuntimeError(
            f"{workdir} is locked ({locks[0]}) and this platform cannot list processes: if no other snakemake "
            f"runs there, remove the stale lock with `{' '.join(unlock)}` and rerun"
        )
    if pids:
        raise RuntimeError(
            f"{workdir} is locked by a running snakemake (pid {', '.join(map(str, pids))}): wait for it to "
            "finish, or stop it, and rerun"
        )
    done = subprocess.run(unlock, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(unlock)}` failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return (
        f"removed the stale lock in {workdir}/.snakemake/locks (left by a killed run; no snakemake runs "
        f"there): {' '.join(unlock)}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Returns 1 if the lock is live; otherwise becomes Snakemake with ``argv`` after clearing a stale lock.

    Snakemake replaces this process (``os.execv``), so Ctrl-C reaches it as it would a plain ``snakemake``:
    a Python parent would kill it 0.25 s after the interrupt and leave the very lock this module clears.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    snakemake = [sys.executable, "-m", "snakemake"]
    try:
        message = clear_stale_lock(args, snakemake)
    except RuntimeError as error:
        print(f"sparsectx.pipeline: {error}", file=sys.stderr)
        return 1
    if message:
        print(f"sparsectx.pipeline: {message}", file=sys.stderr, flush=True)
    os.execv(sys.executable, [*snakemake, *args])


if __name__ == "__main__":
    sys.exit(main())
