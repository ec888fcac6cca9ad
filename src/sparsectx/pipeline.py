"""Runs Snakemake as ``make demo`` does, first clearing a lock that a killed run left behind.

    python -m sparsectx.pipeline --profile workflow/profiles/local all_tables     # what `make demo` runs

Snakemake locks its working directory (``.snakemake/locks/``) while it runs and removes the lock when it
exits; a SIGKILL (or a lost node) leaves the lock, and every later run stops with ``LockException`` until
``snakemake --unlock``. A lock is stale when no live Snakemake process works in that directory: then it is
removed (with the command that does so printed) and the run starts. When one is running, nothing is touched
and the message says which process holds it (``snakemake_processes`` says what counts as one). Processes
are seen on this host only: a Snakemake running on another host over a shared filesystem is not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

PROC = Path("/proc")
"""Where live processes are listed (Linux); elsewhere a stale lock is named, not removed."""


def workdir_of(args: Sequence[str], cwd: Path | None = None) -> Path:
    """Returns the working directory Snakemake would use for ``args`` (``--directory``/``-d``, else ``cwd``).

    A relative ``--directory`` is resolved against ``cwd`` (default: this process's current directory).
    """
    base = Path.cwd() if cwd is None else cwd
    for i, arg in enumerate(args):
        if arg in ("--directory", "-d") and i + 1 < len(args):
            return (base / args[i + 1]).resolve()
        if arg.startswith("--directory="):
            return (base / arg.split("=", 1)[1]).resolve()
    return base.resolve()


def lock_files(workdir: Path) -> list[Path]:
    """Returns the lock files Snakemake holds (or left behind) in ``workdir``, sorted."""
    return sorted((workdir / ".snakemake" / "locks").glob("*.lock"))


def ancestors(proc: Path = PROC) -> set[int]:
    """Returns the ids of this process and its ancestors (a wrapper such as ``run_snakemake.sh`` that started
    this entry is not a Snakemake run holding the lock)."""
    pids, pid = set(), os.getpid()
    while pid > 0 and pid not in pids:
        pids.add(pid)
        try:
            stat = (proc / str(pid) / "stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state; the name may hold spaces
    return pids


def snakemake_processes(workdir: Path, proc: Path = PROC) -> dict[int, str] | None:
    """Returns {pid: command line} of the live Snakemake processes working in ``workdir``; None if processes
    cannot be listed.

    A process counts when any word of its command line mentions snakemake (``snakemake``, ``python -u -m
    snakemake``, ``python .../bin/snakemake``, a wrapper such as ``conda run snakemake`` or ``bash -c
    "snakemake ..."``) and it works in ``workdir``: its current directory is ``workdir`` (Snakemake changes into
    its ``--directory`` before locking), or its ``--directory`` resolves there (a wrapper, or a run still
    starting). This process and its ancestors never count. A false match only keeps a lock, with a message
    naming the process.
    """
    if not proc.is_dir():
        return None
    found, skip = {}, ancestors(proc)
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            words = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:  # gone meanwhile, or another user's process
            continue
        mentions = any("snakemake" in word.lower() for word in words)
        if mentions and workdir in (cwd.resolve(), workdir_of(words, cwd)):
            found[int(entry.name)] = " ".join(word for word in words if word)
    return dict(sorted(found.items()))


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
    holders = snakemake_processes(workdir)
    if holders is None:
        raise RuntimeError(
            f"{workdir} is locked ({locks[0]}) and this platform cannot list processes: if no other snakemake "
            f"runs there, remove the stale lock with `{' '.join(unlock)}` and rerun"
        )
    if holders:
        named = "; ".join(f"pid {pid}: {command[:200]}" for pid, command in holders.items())
        raise RuntimeError(
            f"{workdir} is locked by a running snakemake ({named}): the lock is kept. Wait for it to finish, "
            f"or stop it (`kill {' '.join(map(str, holders))}`), and rerun"
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
