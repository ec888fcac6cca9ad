"""Exponential moving average of named tensors: the SCOPD/SCOPD+ EMA teacher (SCOPD §4.1, decay 0.9999).

It works on any ``{name: tensor}`` dict, so the same code averages full parameters or only the LoRA adapter
tensors (training-methods spec §1.8). The shadow is kept in fp32 on each tensor's device.

Conventions (spec §1.8, chosen deliberately and stated here):

- ``decay`` d is the weight on the OLD shadow: θ_ema ← d·θ_ema + (1-d)·θ. (Vision-OPD/TRL's "update rate" is
  α = 1 - d.) d = 1 freezes the first copy; d = 0 tracks the student.
- Lazy init (SCOPD's ``ema_lazy_init: true``, OPSD): the first ``update`` copies θ with no decay applied.
  Until then ``initialized`` is False and ``swapped`` leaves the tensors alone, i.e. the teacher is the
  current student. Call ``update`` once per optimizer step, right after ``optimizer.step()``.
- With LoRA, A and B are averaged separately, so the teacher's delta is EMA(B)·EMA(A) ≠ EMA(B·A); fine for
  slow EMA.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch


def ema_update_(shadow: Mapping[str, torch.Tensor], params: Mapping[str, torch.Tensor], decay: float) -> None:
    """Returns None; updates ``shadow`` in place: s ← d·s + (1-d)·θ for every name (SCOPD §4.1 EMA teacher).

    Args:
        shadow: {name: fp32 tensor} running average, updated in place.
        params: {name: tensor} current values, any float dtype, same names and shapes; read only.
        decay: d in [0, 1], the weight on the old shadow.
    """
    with torch.no_grad():
        for name, average in shadow.items():
            average.mul_(decay).add_(params[name].detach().to(average.dtype), alpha=1.0 - decay)


class ParameterEMA:
    """Holds the fp32 EMA shadow of a fixed set of named tensors; ``state_dict`` round-trips it for resume."""

    def __init__(self, decay: float) -> None:
        """Creates an empty (uninitialized) average.

        Args:
            decay: d in [0, 1], the weight on the old shadow (SCOPD: 0.9999).
        """
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0.0 <= decay <= 1.0:
            raise ValueError(
                f"decay={decay!r} must lie in [0, 1]: the weight on the old average (SCOPD 0.9999)"
            )
        self._decay = float(decay)
        self._shadow: dict[str, torch.Tensor] = {}
        self._num_updates = 0

    @property
    def decay(self) -> float:
        """The weight d on the old shadow."""
        return self._decay

    @property
    def num_updates(self) -> int:
        """How many times ``update`` ran (the first one is the lazy copy)."""
        return self._num_updates

    @property
    def initialized(self) -> bool:
        """Whether the first ``update`` has copied the tensors."""
        return self._num_updates > 0

    def shadow(self) -> dict[str, torch.Tensor]:
        """Returns the {name: fp32 tensor} average itself (not a copy); empty before the first update."""
        return self._shadow

    def _check_names(self, params: Mapping[str, torch.Tensor]) -> None:
        if set(params) != set(self._shadow):
            missing, extra = sorted(set(self._shadow) - set(params)), sorted(set(params) - set(self._shadow))
            raise KeyError(
                f"EMA tensors changed since the first update: missing {missing}, unexpected {extra}"
            )
        for name, value in params.items():
            if value.shape != self._shadow[name].shape:
                raise ValueError(
                    f"EMA tensor {name!r} has shape {tuple(value.shape)}, the average has "
                    f"{tuple(self._shadow[name].shape)}"
                )

    def update(self, params: Mapping[str, torch.Tensor]) -> None:
        """Returns None; the first call copies ``params`` (lazy init), later calls do θ_ema ← dθ_ema + (1-d)θ.

        Args:
            params: {name: tensor} current student values (e.g. the trainable LoRA tensors), any float dtype.
        """
        if not self.initialized:
            self._shadow = {name: p.detach().to(torch.float32, copy=True) for name, p in params.items()}
        else:
            self._check_names(params)
            ema_update_(self._shadow, params, self._decay)
        self._num_updates += 1

    @contextmanager
    def swapped(self, params: Mapping[str, torch.Tensor]) -> Iterator[None]:
        """Returns a context in which ``params`` hold the average; on exit their exact old values come back.

        Run the teacher forward inside it (in ``eval()`` and ``no_grad``). Before the first update the tensors
        are left unchanged (the teacher is the current student, SCOPD's lazy init).

        Args:
            params: {name: tensor} the live tensors (e.g. ``dict(model.named_parameters())`` restricted to the
                averaged names); written in place and restored bit-exactly.
        """
        if not self.initialized:
            yield
            return
        self._check_names(params)
        with torch.no_grad():
            backup = {name: p.detach().clone() for name, p in params.items()}
            for name, p in params.items():
                p.copy_(self._shadow[name])
        try:
            yield
        finally:
            with torch.no_grad():
                for name, p in params.items():
                    p.copy_(backup[name])

    def state_dict(self) -> dict[str, Any]:
        """Returns {"decay", "num_updates", "shadow"} for the checkpoint (shadow tensors are not copied)."""
        return {"decay": self._decay, "num_updates": self._num_updates, "shadow": dict(self._shadow)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Returns None; restores a ``state_dict``. A different decay is an error (it defines the run).

        Args:
            state: the mapping ``state_dict`` returned, e.g. after ``torch.load``.
        """
        if float(state["decay"]) != self._decay:
            raise ValueError(
                f"checkpoint EMA decay={state['decay']!r} differs from the configured decay={self._decay!r}; "
                "resume with the decay the run started with"
            )
        self._num_updates = int(state["num_updates"])
        self._shadow = {name: t.detach().to(torch.float32, copy=True) for name, t in state["shadow"].items()}
