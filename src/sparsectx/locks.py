"""One writer at a time: a lock file per run directory and per evaluation output, held for the whole job.

Two trainers of one run directory, or two evaluations of one benchmark in one results leaf, would write the same
files at once: a resume state swapped under the other's feet, prediction rows interleaved or dropped by the
other's resume. Each job therefore holds a lock file while it runs (``<run_dir>/train.lock``;
``<leaf>/<bench>.lock`` and its Pass@K, shard and efficiency siblings, ``sparsectx.eval.runner``).

How it holds, also on a filesystem shared by several hosts (NFS, Lustre, GPFS):

- The lock file is created with ``O_CREAT | O_EXCL``, atomic there too: one job wins. It holds JSON naming its
  holder (``process_owner``): user, host, pid, the process's start time and the kernel's boot id, the command,
  and when the job started.
- A second job finds the file and is refused at once (``LockHeldError``), naming the lock file, the holder and
  what to do. Nothing of the job has been read or written by then.
- A lock whose holder ran on this host and is gone (no such pid; or the pid is another process now, started at
  another time or before a reboot) is stale: the next job takes it over with a warning. The holder also keeps
  an ``flock`` on the open file (dropped by the kernel when it dies); taking over needs that flock and rewrites
  the file in place, so two jobs that find the same stale lock cannot both take it.
- A lock from another host is never taken over: this host cannot see that host's processes. The message says
  how to check and remove it by hand. Nor is a lock file that names no holder (empty or not ours).
- The lock file is removed when the block ends, also by an exception or a first Ctrl-C; a SIGKILL or a lost node
  leaves it, and the next job on that host finds it stale.
"""

from __future__ import annotations

import errno
import fcntl
import getpass
import json
import logging
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
"""Changes at every boot (Linux): a holder recorded before a reboot is gone, whatever its pid is now."""


class LockHeldError(RuntimeError):
    """Another job holds the lock (or may hold it): the message names the lock file, the holder and the fix."""


def _boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return None


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid with no name (containers)
        return str(os.getuid())


def process_start(pid: int) -> int | None:
    """Returns when process ``pid`` started (clock ticks after boot, ``/proc/<pid>/stat``), or None if unknown.

    Together with the pid it names one process: a pid reused by a later process has a later start.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the name before ")" may hold spaces


def process_owner(purpose: str) -> dict[str, Any]:
    """Returns this process as a lock's holder: user, uid, host, pid, start, boot id, command, start time."""
    return {
        "purpose": purpose,
        "user": _user(),
        "uid": os.getuid(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "process_start": process_start(os.getpid()),
        "boot_id": _boot_id(),
        "command": " ".join(sys.argv)[:400],
        "started": datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def _process_exists(pid: int) -> bool:
    """Returns whether process ``pid`` exists on this host (another user's process answers PermissionError)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_status(owner: dict[str, Any]) -> str:
    """Returns whether a recorded holder still runs: ``alive``, ``dead`` or ``elsewhere`` (another host).

    Only a holder on this host can be dead: its pid is free, or belongs to a process started at another time or
    before a reboot. A pid of another user's process (no permission to signal it) is alive.
    """
    if owner.get("host") != socket.gethostname():
        return "elsewhere"
    boot = _boot_id()
    if owner.get("boot_id") is not None and boot is not None and owner["boot_id"] != boot:
        return "dead"
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return "dead"
    if not _process_exists(pid):
        return "dead"
    started = owner.get("process_start")
    now = process_start(pid)
    if started is not None and now is not None and started != now:
        return "dead"
    return "alive"


def describe(owner: dict[str, Any]) -> str:
    """Returns one line naming a holder: user, host, pid, when it started and its command."""
    return (
        f"{owner.get('purpose', 'job')} of user {owner.get('user')} on host {owner.get('host')}, pid "
        f"{owner.get('pid')}, started {owner.get('started')} (`{owner.get('command')}`)"
    )


def _read_owner(fd: int) -> dict[str, Any] | None:
    """Returns the holder a lock file records, or None when it names none (empty, torn or not ours)."""
    try:
        owner = json.loads(os.pread(fd, 1 << 16, 0).decode())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(owner, dict) or not isinstance(owner.get("host"), str):
        return None
    pid = owner.get("pid")
    return owner if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None


def _flock(fd: int) -> bool | None:
    """Returns True after taking an exclusive flock on ``fd``, False if another open file holds one, None if
    the filesystem has no flock (then only the O_EXCL file and the pid guard the lock)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return None
    return True


def _same_file(fd: int, path: Path) -> bool:
    """Returns whether ``path`` still names the file open as ``fd`` (not removed, not replaced)."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _refusal(path: Path, owner: dict[str, Any] | None, status: str, guarded: str) -> LockHeldError:
    """Returns the error for a lock this job may not take: who holds it and what to do."""
    if owner is None:
        return LockHeldError(
            f"{path} exists but names no holder (empty or not JSON: a job taking it this instant, one that died "
            f"while taking it, or a file that is not a lock). It guards {guarded} and is not taken over "
            f"automatically: if no job writes there now, remove it (`rm {path}`) and rerun"
        )
    holder = describe(owner)
    if status == "elsewhere":
        return LockHeldError(
            f"{path} is held by a {holder}: {guarded} is in use by another host. A lock from another host is "
            "never taken over, since this host cannot see that host's processes. If you are sure that job has "
            f"ended (e.g. `ssh {owner.get('host')} ps -p {owner.get('pid')}` lists nothing), remove it "
            f"(`rm {path}`) and rerun"
        )
    if status == "dead":  # gone, but its lock file could not be taken over (another user's, or flock held)
        return LockHeldError(
            f"{path} is held by a {holder}, which no longer runs, but the lock cannot be taken over (the file "
            f"belongs to another user, or a process it started still holds it). Once no job writes {guarded}, "
            f"remove it (`rm {path}`) and rerun"
        )
    return LockHeldError(
        f"{path} is held by a running {holder}: two jobs writing {guarded} at once would corrupt it, so this one "
        f"stops. Wait for that job to end, or stop it (`kill {owner.get('pid')}` on {owner.get('host')}), and "
        f"rerun; if you are sure it no longer runs, remove {path} and rerun"
    )


def _take_over(path: Path, record: bytes, guarded: str) -> int | None:
    """Returns an open, flocked descriptor of ``path`` rewritten to name this process, when its holder is a
    dead process of this host; None when the file vanished meanwhile (try again). Raises ``LockHeldError``
    when its holder runs, is on another host or unknown."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except PermissionError:  # another user's lock file: read who holds it, never take it over
        with open(path, "rb") as handle:
            owner = _read_owner(handle.fileno())
        raise _refusal(path, owner, "unknown" if owner is None else owner_status(owner), guarded) from None
    try:
        owner = _read_owner(fd)
        status = "unknown" if owner is None else owner_status(owner)
        if owner is None or status != "dead":
            raise _refusal(path, owner, status, guarded)
        if _flock(fd) is False:  # a process it started, or another job taking it over right now
            raise _refusal(path, owner, status, guarded)
        if not _same_file(fd, path) or _read_owner(fd) != owner:
            os.close(fd)
            return None
        log.warning("taking over the stale lock %s of a %s, which no longer runs", path, describe(owner))
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
        os.fsync(fd)
    except BaseException:
        with suppress(OSError):
            os.close(fd)
        raise
    return fd


def acquire(path: Path, purpose: str, guarded: str) -> int:
    """Returns the open descriptor holding the lock file ``path`` (created, or taken over from a dead holder).

    Args:
        path: the lock file; its folder is created if missing.
        purpose: what holds it, as the messages name it (``training run``, ``evaluation``).
        guarded: what it protects, for the messages (``the run directory runs/...``).

    Raises:
        LockHeldError: another job holds it, or may (another host's, or a file naming no holder).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    record = (json.dumps(process_owner(purpose), sort_keys=True) + "\n").encode()
    for _ in range(5):  # a holder that releases while we look makes us look again
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            taken = _take_over(path, record, guarded)
            if taken is not None:
                return taken
            continue
        try:
            _flock(fd)  # nobody else can hold it yet: ours until we close it
            os.write(fd, record)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        return fd
    raise LockHeldError(f"{path} was taken and released repeatedly while this job tried to take it; rerun")


def release(path: Path, fd: int) -> None:
    """Returns None after removing the lock file ``path`` held as ``fd`` and closing it; a lock file removed or
    replaced meanwhile (by hand, or taken over) is left as it is, with a warning."""
    try:
        if _same_file(fd, path):
            path.unlink()
        else:
            log.warning("%s was removed or replaced while this job held it; left as it is", path)
    except OSError as err:
        if err.errno != errno.ENOENT:
            log.warning("could not remove the lock %s: %s", path, err)
    finally:
        os.close(fd)


@contextmanager
def exclusive(path: Path, purpose: str, guarded: str) -> Iterator[None]:
    """Holds the lock file ``path`` for the block (``acquire``), releasing it however the block ends.

    Raises ``LockHeldError`` before the block runs when another job holds it.
    """
    fd = acquire(path, purpose, guarded)
    try:
        yield
    finally:
        release(path, fd)
