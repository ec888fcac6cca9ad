"""Digests without a second pass (issue 13, hashing cost): ``trainer.pt`` is hashed as it is written, never
read back; a resume checks the payload's size before the model loads and its full sha256 while loading it, so
a damaged or foreign payload is still refused before anything of it is used; a full disk while saving names
the file and the space the state needs."""

from __future__ import annotations

import builtins
import errno
import json
from pathlib import Path

import pytest
import torch

from faults.full_disk import full_disk
from sparsectx.checkpoints import DamagedFileError
from sparsectx.hashing import file_sha256
from sparsectx.training import checkpoint as ckpt

pytestmark = pytest.mark.faults


def _save(state: Path, step: int, size: int = 1 << 16) -> dict:
    payload = {"step": step, "samples_seen": step, "w": torch.arange(size, dtype=torch.float32) * step}
    ckpt.save_state(state, payload, {"step": step, "samples_seen": step})
    return payload


def _reads_of(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    """Returns the list that every later ``open`` of a file called ``name`` for reading is recorded in."""
    reads: list[str] = []
    real = builtins.open

    def spying(file, mode="r", *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if Path(str(file)).name == name and "r" in mode:
            reads.append(str(file))
        return real(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spying)
    return reads


def test_the_state_payload_is_hashed_as_it_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _reads_of(monkeypatch, ckpt.STATE_FILE)
    _save(tmp_path / "state", step=1)
    assert reads == []  # never read back to be hashed
    meta = json.loads((tmp_path / "state" / ckpt.META_FILE).read_text())
    payload = tmp_path / "state" / ckpt.STATE_FILE
    assert meta["payload_sha256"] == file_sha256(payload)
    assert meta["payload_bytes"] == payload.stat().st_size


def test_a_damaged_payload_passes_the_cheap_check_and_is_refused_while_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    _save(state, step=1)
    payload = state / ckpt.STATE_FILE
    data = bytearray(payload.read_bytes())
    middle = len(data) // 2  # inside the tensor's bytes: torch.load alone would accept them
    data[middle : middle + 8] = bytes(255 - b for b in data[middle : middle + 8])
    payload.write_bytes(bytes(data))
    with monkeypatch.context() as patch:
        reads = _reads_of(patch, ckpt.STATE_FILE)
        meta = ckpt.read_meta(state)  # before the model loads: metadata, presence and size only
        assert reads == []
    assert meta is not None and meta["step"] == 1
    with pytest.raises(DamagedFileError, match=rf"{payload} does not match.*sha256.*delete"):
        ckpt.load_state(state, torch.device("cpu"), meta)


def test_a_truncated_or_foreign_payload_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _save(state, step=1)
    payload = state / ckpt.STATE_FILE
    payload.write_bytes(payload.read_bytes()[:-100])
    with pytest.raises(DamagedFileError, match=rf"{payload} does not match.*bytes, recorded.*delete"):
        ckpt.read_meta(state)
    other = tmp_path / "other"
    _save(other, step=2, size=1 << 15)
    payload.write_bytes((other / ckpt.STATE_FILE).read_bytes())
    with pytest.raises(DamagedFileError, match=rf"{payload} does not match"):
        ckpt.read_meta(state)


def test_an_intact_state_loads_with_its_digest_checked(tmp_path: Path) -> None:
    saved = _save(tmp_path / "state", step=3)
    meta = ckpt.read_meta(tmp_path / "state")
    loaded = ckpt.load_state(tmp_path / "state", torch.device("cpu"), meta)
    assert torch.equal(loaded["w"], saved["w"]) and loaded["step"] == 3


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_a_full_disk_while_saving_state_names_the_file_and_the_space_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    state = tmp_path / "state"
    _save(state, step=1)
    before = {p.name: p.read_bytes() for p in state.iterdir()}
    full_disk(monkeypatch, where, 4096)
    with pytest.raises(OSError, match=r"No space left on device while writing .*trainer\.pt.*needs about") as caught:
        _save(state, step=2)
    assert caught.value.errno == errno.ENOSPC and str(state) in str(caught.value)
    assert {p.name: p.read_bytes() for p in state.iterdir()} == before  # the last state is whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]  # the half-written copy is gone
