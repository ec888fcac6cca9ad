"""Runs Snakemake as ``make demo`` does, first clearing a lock that a killed run left behind.

    python -m sparsectx.pipeline --profile workflow/profiles/local all_tables     # what `make demo` runs

Snakemake locks its working directory (``.snakemake/locks/``) while it runs and removes the lock when it
exits; a SIGKILL (or a lost node) leaves the lock, and every later run stops with ``LockException`` until
``snakemake --unlock``. This entry removes such a lock only when it can show that nothing holds it, and
otherwise touches nothing and says why:

- Which host took it. While Snakemake runs (as its child, in the foreground), the entry records itself (user,
  host, pid, process start; ``sparsectx.locks.process_owner``) in
  ``.snakemake/locks/sparsectx-entry.<host>.<pid>.json`` and removes the record when Snakemake has ended and
  removed its lock, so a record outlives only a killed run (or one whose Snakemake left its lock).
  A lock with no record (Snakemake started some other way) or with a record from another host is kept: the
  processes of another host cannot be seen from here.
- Whether its process runs. A record's process still alive here keeps the lock, and so does any live process
  that mentions snakemake and works in the directory (``snakemake_processes``), or that cannot be inspected
  (another user's working directory, an unreadable command line): the message lists what could not be seen.

Then the lock is stale: it is removed with ``snakemake --unlock`` (the command printed) and the run starts.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsectx.foreground import run_in_foreground
from sparsectx.locks import describe, owner_status, process_owner

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


@dataclass(frozen=True)
class Holder:
    """A live process that holds, or may hold, a Snakemake lock."""

    command: str
    """Its command line (what could be read of it)."""
    unseen: str | None = None
    """What of it could not be inspected (None: it mentions snakemake and works in the directory)."""


def _inspect(entry: Path, workdir: Path) -> Holder | None:
    """Returns the process ``entry`` (``/proc/<pid>``) as a holder of ``workdir``'s lock, or None when it is
    not one: gone, or seen to be no Snakemake working there. What cannot be read makes it a possible holder."""
    try:
        words = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except (FileNotFoundError, ProcessLookupError):
        return None  # gone meanwhile
    except OSError as err:  # e.g. /proc mounted with hidepid: another user's process, nothing readable
        return Holder("?", f"its command line ({err.strerror or err})")
    command = " ".join(word for word in words if word)
    if not any("snakemake" in word.lower() for word in words):
        return None
    try:
        cwd = Path(os.readlink(entry / "cwd"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError as err:  # another user's process: its working directory is not readable
        return Holder(command, f"its working directory ({err.strerror or err})")
    return Holder(command) if workdir in (cwd.resolve(), workdir_of(words, cwd)) else None


def snakemake_processes(workdir: Path, proc: Path = PROC) -> dict[int, Holder] | None:
    """Returns {pid: holder} of the live processes that hold or may hold ``workdir``'s lock; None if processes
    cannot be listed.

    A process holds it when any word of its command line mentions snakemake (``snakemake``, ``python -u -m
    snakemake``, ``python .../bin/snakemake``, a wrapper such as ``conda run snakemake`` or ``bash -c
    "snakemake ..."``) and it works in ``workdir``: its current directory is ``workdir`` (Snakemake changes into
    its ``--directory`` before locking), or its ``--directory`` resolves there (a wrapper, or a run still
    starting). It may hold it when its command line cannot be read, or it mentions snakemake and its working
    directory cannot be read (another user's process): ``Holder.unseen`` says what. This process and its
    ancestors never count. A false match only keeps a lock, with a message naming the process.
    """
    if not proc.is_dir():
        return None
    found, skip = {}, ancestors(proc)
    for entry in proc.iterdir():
        if entry.name.isdigit() and int(entry.name) not in skip:
            holder = _inspect(entry, workdir)
            if holder is not None:
                found[int(entry.name)] = holder
    return dict(sorted(found.items()))


RECORD_GLOB = "sparsectx-entry.*.json"
"""The entry's records in ``.snakemake/locks/`` (Snakemake reads only ``<n>.input.lock``/``<n>.output.lock``)."""


def record_path(workdir: Path, host: str, pid: int) -> Path:
    """Returns where the entry records the Snakemake run of ``pid`` on ``host`` in ``workdir``."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in host)
    return workdir / ".snakemake" / "locks" / f"sparsectx-entry.{safe}.{pid}.json"


def record_run(workdir: Path) -> Path:
    """Returns the record of this process (about to become Snakemake) written into ``workdir``'s lock folder."""
    owner = process_owner("snakemake run")
    path = record_path(workdir, owner["host"], owner["pid"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(owner, sort_keys=True) + "\n")
    return path


def run_records(workdir: Path) -> dict[Path, dict[str, Any] | None]:
    """Returns {record file: its holder} of the entry's records in ``workdir`` (None: unreadable)."""
    records: dict[Path, dict[str, Any] | None] = {}
    for path in sorted((workdir / ".snakemake" / "locks").glob(RECORD_GLOB)):
        try:
            owner = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            owner = None
        records[path] = owner if isinstance(owner, dict) else None
    return records


def _refuse_unless_dead(workdir: Path, locks: list[Path], unlock: str) -> None:
    """Raises ``RuntimeError`` unless the records show that the lock was taken on this host by runs of the entry
    that are all gone."""
    records = run_records(workdir)
    where = f"{workdir} is locked ({locks[0]})"
    sure = f"If you are sure no snakemake runs in {workdir} on any host, remove the lock with `{unlock}` and rerun"
    if not records:
        raise RuntimeError(
            f"{where}, and no record says which host took the lock (a snakemake started without this entry): a "
            f"snakemake on another host sharing this directory cannot be ruled out, so the lock is kept. {sure}"
        )
    live = {path: owner for path, owner in records.items() if owner is None or owner_status(owner) != "dead"}
    if live:
        named = "; ".join(
            f"{path.name}: unreadable" if owner is None else f"{describe(owner)} ({owner_status(owner)})"
            for path, owner in live.items()
        )
        elsewhere = any(owner is not None and owner_status(owner) == "elsewhere" for owner in live.values())
        why = "another host's processes cannot be seen from here" if elsewhere else "it may still run"
        raise RuntimeError(f"{where} by a run that this host cannot show has ended ({named}): {why}. {sure}")


def clear_stale_lock(args: Sequence[str], snakemake: Sequence[str], proc: Path = PROC) -> str | None:
    """Returns a message after removing a stale lock of the run ``args`` describes; None if there is none.

    Args:
        args: The Snakemake arguments of the run (targets, ``--profile``, ``--directory``, ...).
        snakemake: The command that starts Snakemake (``[python, "-m", "snakemake"]``).
        proc: Where live processes are listed.

    Raises:
        RuntimeError: The lock is or may be held: by a live Snakemake process, by a process that cannot be
            inspected, by a run recorded on another host or not recorded at all, or processes cannot be listed;
            the message names the directory, the holder, what could not be inspected and what to do.
    """
    workdir = workdir_of(args)
    locks = lock_files(workdir)
    if not locks:
        for path, owner in run_records(workdir).items():  # runs that ended before taking a lock
            if owner is not None and owner_status(owner) == "dead":
                path.unlink(missing_ok=True)
        return None
    unlock = " ".join([*snakemake, *args, "--unlock"])
    holders = snakemake_processes(workdir, proc)
    if holders is None:
        raise RuntimeError(
            f"{workdir} is locked ({locks[0]}) and this platform cannot list processes: if no other snakemake "
            f"runs there, remove the stale lock with `{unlock}` and rerun"
        )
    running = {pid: h for pid, h in holders.items() if h.unseen is None}
    if running:
        named = "; ".join(f"pid {pid}: {h.command[:200]}" for pid, h in running.items())
        raise RuntimeError(
            f"{workdir} is locked by a running snakemake ({named}): the lock is kept. Wait for it to finish, "
            f"or stop it (`kill {' '.join(map(str, running))}`), and rerun"
        )
    if holders:
        named = "; ".join(f"pid {pid} ({h.command[:200]}): {h.unseen}" for pid, h in holders.items())
        raise RuntimeError(
            f"{workdir} is locked ({locks[0]}) and these processes could not be inspected, so any of them may "
            f"hold the lock, which is kept: {named}. If none of them is a snakemake working in {workdir}, "
            f"remove the lock with `{unlock}` and rerun"
        )
    _refuse_unless_dead(workdir, locks, unlock)
    done = subprocess.run([*snakemake, *args, "--unlock"], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"`{unlock}` failed ({done.returncode}):\n{done.stderr[-2000:]}")
    for path in run_records(workdir):  # the killed runs' records, all dead (Snakemake's unlock may keep them)
        path.unlink(missing_ok=True)
    return (
        f"removed the stale lock in {workdir}/.snakemake/locks (left by a killed run of this entry on "
        f"{socket.gethostname()}; no snakemake runs there): {unlock}"
    )


DRY_RUN = ("-n", "--dry-run", "--dryrun")
"""Arguments of a Snakemake run that takes no lock (and so leaves no record)."""


def run_recorded(args: Sequence[str], snakemake: Sequence[str]) -> int:
    """Returns the exit status of Snakemake run with ``args`` in the foreground (``sparsectx.foreground``), its
    host recorded beside the lock (``record_run``) while it runs.

    The record goes when Snakemake ends and has removed its lock (Snakemake's own clean-up is not relied on);
    it stays beside a lock that Snakemake left, so that the next run can tell the lock is stale.
    """
    workdir = workdir_of(args)
    record = record_run(workdir)
    try:
        return run_in_foreground([*snakemake, *args])
    finally:
        if not lock_files(workdir):
            record.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Returns 1 if the lock is or may be held; otherwise clears a stale lock and returns the exit status of
    Snakemake run with ``argv`` (``run_recorded``; a dry run takes no lock and is not recorded)."""
    args = list(sys.argv[1:] if argv is None else argv)
    snakemake = [sys.executable, "-m", "snakemake"]
    try:
        message = clear_stale_lock(args, snakemake)
    except RuntimeError as error:
        print(f"sparsectx.pipeline: {error}", file=sys.stderr)
        return 1
    if message:
        print(f"sparsectx.pipeline: {message}", file=sys.stderr, flush=True)
    if any(arg in DRY_RUN for arg in args):
        return run_in_foreground([*snakemake, *args])
    return run_recorded(args, snakemake)


if __name__ == "__main__":
    sys.exit(main())
