"""A full disk while saving a resume state or a checkpoint names the file, keeps the old one, frees the space.

``torch.save`` writes the state through ``sparsectx.io``'s hashing stream, whose own ENOSPC is re-raised
(torch rewraps it as a RuntimeError naming no errno: the real full disk is in test_state_digests.py); here a
writer failing with OSError(ENOSPC), as safetensors and HF's writers do, is injected.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

from sparsectx.training import checkpoint as ckpt

pytestmark = pytest.mark.faults

OS_FULL = OSError(errno.ENOSPC, "No space left on device")


def _state(tmp_path: Path, step: int) -> Path:
    state = tmp_path / "state"
    ckpt.save_state(state, {"step": step, "samples_seen": step, "w": torch.ones(3) * step}, {"step": step})
    return state


def test_a_full_disk_while_saving_state_names_it_and_keeps_the_last_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = _state(tmp_path, step=1)
    before = {p.name: p.read_bytes() for p in state.iterdir()}

    def full(obj, stream, *args, **kwargs) -> None:  # noqa: ANN001
        stream.write(b"partial")
        raise OS_FULL

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OSError) as caught:
        ckpt.save_state(state, {"step": 2, "samples_seen": 2}, {"step": 2})
    assert caught.value.errno == errno.ENOSPC
    assert "trainer.pt" in str(caught.value) and str(state) in str(caught.value)
    assert {p.name: p.read_bytes() for p in state.iterdir()} == before  # the last state is whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]  # the half-written copy is gone
    assert ckpt.read_meta(state)["step"] == 1


def test_other_torch_errors_are_not_mistaken_for_a_full_disk(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    state = _state(tmp_path, step=1)

    def broken(*args, **kwargs) -> None:  # noqa: ANN002, ANN003
        raise RuntimeError("cannot pickle 'generator' object")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(RuntimeError, match="cannot pickle"):
        ckpt.save_state(state, {"step": 2}, {"step": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]


def test_a_full_disk_while_saving_a_checkpoint_names_it_and_keeps_the_old_one(tmp_path: Path) -> None:
    target = tmp_path / "checkpoint"
    target.mkdir()
    (target / "model.safetensors").write_bytes(b"old weights")

    class FullDiskModel:
        def save_pretrained(self, path: Path) -> None:
            (Path(path) / "model.safetensors").write_bytes(b"part")
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as caught:
        ckpt.save_checkpoint(target, FullDiskModel(), processor=None, info={"steps": 1})
    assert caught.value.errno == errno.ENOSPC and str(target) in str(caught.value)
    assert (target / "model.safetensors").read_bytes() == b"old weights"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
