"""A full disk while pretraining saves its resume state (issue 13): the error names ``state.pt`` and the space
the state needs, the previous state stays whole (a rerun resumes from it) and no half-written copy is left.

Both a real tiny tmpfs (where it can be mounted) and an injected ENOSPC are used; the state is saved by
``sparsectx.pretrain.train._save_state`` itself, with a small model and AdamW moments in it."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from faults.full_disk import full_disk, tiny_tmpfs
from sparsectx.pretrain import train as pretrain

pytestmark = pytest.mark.faults


def _trained(width: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Returns a linear model after one AdamW step (so the optimizer holds both moments)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(width, width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(2, width)).sum().backward()
    optimizer.step()
    return model, optimizer


def _saves_and_fills_up(state_dir: Path, fill: Callable[[], None]) -> None:
    """Saves step 1, fills the disk (``fill``), fails to save step 2 and checks what the failure left."""
    model, optimizer = _trained(width=160)  # ~310 kB of state: one fits in 512 kB, a second copy does not
    pretrain._save_state(state_dir, model, optimizer, 1, [{"step": 1}], 1.0)
    before = (state_dir / "state.pt").read_bytes()
    fill()
    with pytest.raises(OSError) as caught:
        pretrain._save_state(state_dir, model, optimizer, 2, [{"step": 2}], 2.0)
    message = str(caught.value)
    assert caught.value.errno == errno.ENOSPC
    assert f"while writing {state_dir / 'state.pt'}" in message and "needs about" in message, message
    assert "previous state.pt" in message and "free space" in message, message
    assert (state_dir / "state.pt").read_bytes() == before  # the previous state, whole
    assert sorted(p.name for p in state_dir.iterdir()) == ["state.pt"]  # the half-written copy is gone
    assert pretrain.load_state(state_dir / "state.pt", "cpu")["step"] == 1


def test_a_real_full_disk_during_a_pretraining_save_keeps_the_previous_state(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "disk", 512 * 1024) as disk:
        _saves_and_fills_up(disk / "state", fill=lambda: None)


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_an_injected_full_disk_during_a_pretraining_save_keeps_the_previous_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    _saves_and_fills_up(tmp_path / "state", fill=lambda: full_disk(monkeypatch, where, 1024))
