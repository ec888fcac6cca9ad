"""``sparsectx.locks.owner_status``: when a recorded lock holder counts as running, gone, or out of sight."""

from __future__ import annotations

import os
import socket
import subprocess

from sparsectx import locks


def holder(**fields: object) -> dict[str, object]:
    """Returns this process as a lock records it, with ``fields`` replaced."""
    return {**locks.process_owner("training run"), **fields}


def exited_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def test_this_process_is_alive_and_described_by_user_host_pid_and_start() -> None:
    me = holder()
    assert locks.owner_status(me) == "alive"
    line = locks.describe(me)
    assert f"on host {socket.gethostname()}, pid {os.getpid()}, started {me['started']}" in line
    assert f"user {me['user']}" in line


def test_a_holder_of_this_host_that_no_longer_runs_is_dead() -> None:
    start = locks.process_start(os.getpid())
    assert start is not None
    gone = [
        holder(pid=exited_pid()),  # no such process any more
        holder(process_start=start - 1),  # the pid now belongs to a process started later
        holder(pid=0),  # not a pid at all
    ]
    if locks.BOOT_ID.is_file():
        gone.append(holder(boot_id="another boot"))  # recorded before a reboot, whatever runs as its pid now
    assert [locks.owner_status(owner) for owner in gone] == ["dead"] * len(gone)


def test_a_holder_on_another_host_is_never_judged_from_here() -> None:
    assert locks.owner_status(holder(host=f"not-{socket.gethostname()}", pid=exited_pid())) == "elsewhere"
