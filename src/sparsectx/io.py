"""Atomic file writes and run provenance: a result file exists only if it is complete."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
"""errno values of a full disk or an exhausted quota: re-raised naming the file being written."""


def _gb(nbytes: int) -> str:
    return f"{nbytes / 1e9:.3g} GB"


def _space(path: Path, needed: int | None) -> str:
    """Returns ' (it needs about X GB; Y GB free there)' for a full-disk message, or '' without ``needed``."""
    if needed is None:
        return ""
    try:
        free = f"; {_gb(shutil.disk_usage(path.parent).free)} free there"
    except OSError:
        free = ""
    return f" (the file needs about {_gb(needed)}{free})"


def _disk_full(error: OSError, path: Path, undone: str, needed: int | None = None) -> OSError:
    """Returns ``error`` restated with the file being written, the space it needs (when known) and the fix
    (a bare ENOSPC names no path)."""
    return OSError(
        error.errno,
        f"{os.strerror(error.errno)} while writing {path}: {undone}; free space on the filesystem holding "
        f"{path.parent}{_space(path, needed)} (or point the output root elsewhere) and rerun",
    )


def _create_temp(path: Path) -> tuple[int, Path]:
    """Returns (fd, name) of a new hidden file beside ``path``, created with the user's umask.

    ``tempfile.mkstemp`` creates files with mode 0600, which ``os.replace`` keeps: other users of a shared
    results directory could not read them. ``os.open`` with 0o666 lets the umask decide, as ``open`` does.
    """
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def _write_view(fd: int, view: memoryview) -> None:
    """Writes every byte of ``view`` to ``fd`` (unbuffered: a failed write leaves nothing queued)."""
    while view:
        view = view[os.write(fd, view) :]


def _write_all(fd: int, data: bytes) -> None:
    """Writes every byte of ``data`` to ``fd`` and fsyncs it."""
    _write_view(fd, memoryview(data))
    os.fsync(fd)


@dataclass(frozen=True)
class Written:
    """What ``atomic_write_stream`` wrote: the hex sha256 of the file's bytes and its size."""

    sha256: str
    size: int


class HashingWriter:
    """A write-only binary stream over a file descriptor that feeds every byte to sha256 as it is written.

    A block of ``OVERLAP`` bytes or more is hashed on a helper thread while this thread writes it (both
    release the GIL), so the digest costs about max(write, hash) instead of write + hash + a second read.
    The first ``OSError`` is kept in ``error``: ``torch.save`` replaces it with a RuntimeError naming no errno.
    """

    OVERLAP = 1 << 20

    def __init__(self, fd: int, pool: ThreadPoolExecutor) -> None:
        self.fd, self.pool, self.size = fd, pool, 0
        self.digest = hashlib.sha256()
        self.error: OSError | None = None

    def write(self, data: bytes | memoryview) -> int:
        """Returns the number of bytes written (all of ``data``) after hashing and writing them."""
        view = memoryview(data).cast("B")
        hashed: Future[None] | None = None
        try:
            if view.nbytes >= self.OVERLAP:
                hashed = self.pool.submit(self.digest.update, view)
            else:
                self.digest.update(view)
            _write_view(self.fd, view)
        except OSError as error:
            self.error = self.error or error
            raise
        finally:
            if hashed is not None:
                hashed.result()  # ``data`` is only valid during this call
        self.size += view.nbytes
        return view.nbytes

    def flush(self) -> None:
        """Returns None: nothing is buffered (``write`` hands every byte to the kernel)."""


def atomic_write_stream(
    path: str | Path, write: Callable[[BinaryIO], object], undone: str, needed: int | None = None
) -> Written:
    """Returns the sha256 and size of ``path`` after ``write(stream)`` wrote it atomically.

    The bytes go to a temporary file beside ``path`` (the user's umask), are hashed as they are written
    (never read back), fsynced, and renamed onto ``path``. A full disk raises ``OSError`` (errno ENOSPC)
    naming ``path``, ``undone`` (what was kept), the space ``needed`` (bytes, when the caller knows) and the
    fix; the temporary file is removed and ``path`` keeps its previous content, if any.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path)
    try:
        try:
            with ThreadPoolExecutor(1, thread_name_prefix="sha256") as pool:
                stream = HashingWriter(fd, pool)
                try:
                    write(stream)  # type: ignore[arg-type]
                except RuntimeError as error:  # torch's zip writer, after our write raised
                    if stream.error is None:
                        raise
                    raise stream.error from error
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        if error.errno in DISK_FULL:
            raise _disk_full(error, path, undone, needed) from error
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Written(stream.digest.hexdigest(), stream.size)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` via a temporary file in the same directory and ``os.replace``.

    The file gets the user's umask (like ``open``). A full disk raises ``OSError`` (errno ENOSPC) naming
    ``path`` and the fix; the temporary file is removed and ``path`` keeps its previous content, if any.
    """
    atomic_write_stream(
        path, lambda stream: stream.write(data), "the partial file was removed and the old one, if any, kept"
    )


def atomic_write_text(path: str | Path, text: str) -> None:
    """Writes ``text`` (UTF-8) to ``path`` atomically (``atomic_write_bytes``)."""
    atomic_write_bytes(path, text.encode("utf-8"))


TORCH_WRITE_FAILURES = ("file write failed", "unexpected pos", "No space left on device")
"""Phrases of torch's zip writer (``torch.save``) when the bytes cannot be written: it raises a RuntimeError
that carries no errno and no path."""


@contextmanager
def naming_full_disk(path: Path, undone: str) -> Iterator[None]:
    """Runs a third-party writer of ``path`` (``torch.save``, ``save_pretrained``); a full disk is re-raised
    as ``OSError`` (errno ENOSPC) naming ``path``, ``undone`` (what was kept) and the fix."""
    try:
        yield
    except OSError as error:
        if error.errno in DISK_FULL:
            raise _disk_full(error, path, undone) from error
        raise
    except RuntimeError as error:
        if any(phrase in str(error) for phrase in TORCH_WRITE_FAILURES):
            raise _disk_full(OSError(errno.ENOSPC, str(error)), path, undone) from error
        raise


def atomic_write_json(path: str | Path, payload: Any) -> None:
    """Writes ``payload`` as indented, key-sorted JSON, atomically."""
    atomic_write_text(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def append_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Appends ``rows`` as complete JSON lines and fsyncs (a killed run leaves whole lines only, plus at most
    one torn last line that ``read_jsonl`` drops). A full disk truncates the file back to its rows before
    this call and raises ``OSError`` (errno ENOSPC) naming ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows).encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            _write_all(fd, data)
        except OSError as error:
            if error.errno not in DISK_FULL:
                raise
            os.ftruncate(fd, start)  # a later run must not read part of this batch as whole rows
            raise _disk_full(error, path, "the rows of this write were removed, earlier rows kept") from error
    finally:
        os.close(fd)


def read_json_object(path: Path, fix: str, error: type[ValueError] = ValueError) -> dict[str, Any]:
    """Returns the JSON object in ``path``, a file this project wrote (a result, a checkpoint's record, a
    resume state's metadata); raises ``error`` naming the file and ``fix`` when it cannot be read, is not
    JSON or holds another kind of value. Such files are written atomically, so a broken one is damage, never
    a write in progress; ``fix`` says how its kind is restored (rerun the job, delete the state)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise error(f"{path} is not valid JSON ({err}); {fix}") from err
    if not isinstance(data, dict):
        raise error(f"{path} holds {type(data).__name__}, not a JSON object; {fix}")
    return data


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Returns the complete rows of a JSONL file; a torn final line (an interrupted append) is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number != len(lines) - 1:
                raise ValueError(f"{path}: line {number + 1} is not valid JSON") from None
    return rows


def git_commit(root: str | Path | None = None) -> dict[str, Any]:
    """Returns {"sha": ..., "dirty": ...} of the repository holding ``root`` (sha "unknown" outside git)."""
    cwd = str(root or Path(__file__).resolve().parent)
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=cwd,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
    except (OSError, subprocess.CalledProcessError):
        return {"sha": "unknown", "dirty": None}
    return {"sha": sha, "dirty": dirty}
