"""A full disk while saving a resume state or a checkpoint names the file, keeps the old one, frees the space.

torch's zip writer reports a failed write as a RuntimeError with no errno and no path ("unexpected pos",
"file write failed"); safetensors and HF's writers raise OSError(ENOSPC). Both are injected here.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

from sparsectx.training import checkpoint as ckpt

pytestmark = pytest.mark.faults

TORCH_FULL = RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 4352 vs 4246")
OS_FULL = OSError(errno.ENOSPC, "No space left on device")


def _state(tmp_path: Path, step: int) -> Path:
    state = tmp_path / "state"
    ckpt.save_state(state, {"step": step, "samples_seen": step, "w": torch.ones(3) * step}, {"step": step})
    return state


@pytest.mark.parametrize("failure", [TORCH_FULL, OS_FULL], ids=["torch-zip-writer", "enospc"])
def test_a_full_disk_while_saving_state_names_it_and_keeps_the_last_state(
    failure: Exception, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = _state(tmp_path, step=1)
    before = {p.name: p.read_bytes() for p in state.iterdir()}

    def full(obj, path, *args, **kwargs) -> None:  # noqa: ANN001
        Path(path).write_bytes(b"partial")
        raise failure

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
