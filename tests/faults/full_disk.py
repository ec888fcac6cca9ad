"""The fault suite's full disk: ``os.write`` (as ``sparsectx.io`` calls it) fails with ENOSPC after a number of
bytes, or ``os.fsync`` fails with it (delayed allocation and network filesystems report a full disk only there)."""

from __future__ import annotations

import errno
import os

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
