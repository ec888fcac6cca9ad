"""The fault suite's full disks: ``os.write`` (as ``sparsectx.io`` calls it) failing with ENOSPC after a number
of bytes, or ``os.fsync`` failing with it (delayed allocation and network filesystems report a full disk only
there); and, where the platform allows it, a real tmpfs a few hundred kB small."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sparsectx import io


def full_disk(monkeypatch: pytest.MonkeyPatch, where: str, nbytes: int) -> None:
    """Returns None after making the disk fill up at ``where`` ("write": after ``nbytes`` more bytes; "fsync")."""
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if where == "fsync":

        def fsync(fd: int) -> None:
            raise full

        monkeypatch.setattr(io.os, "fsync", fsync)
        return
    real = os.write
    left = [nbytes]

    def write(fd: int, data: bytes) -> int:
        if left[0] <= 0:
            raise full
        written = real(fd, bytes(data)[: left[0]])
        left[0] -= written
        return written

    monkeypatch.setattr(io.os, "write", write)


@contextmanager
def tiny_tmpfs(where: Path, nbytes: int) -> Iterator[Path]:
    """Yields ``where`` with a real tmpfs of ``nbytes`` mounted on it (a disk that truly fills up); skips the
    test where this platform cannot mount one (not root, no mount namespace): the injected variant covers it."""
    where.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={nbytes}", "tmpfs", str(where)]
    if shutil.which("mount") is None or subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root); the injected ENOSPC variant runs instead")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)
