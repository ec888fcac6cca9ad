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

``PeriodicCopy`` is the progressive teacher (spec §1.8; Vision-OPD's ``progressive_update_teacher`` with
``teacher_update_interval``; LT-OPD Table 7) on the same machinery: a ``ParameterEMA`` with d = 0, initialised
eagerly with the initial tensors θ_0 and updated only on every N-th optimizer step, so the teacher is θ_0 until
step N, then θ_N until step 2N, and so on (a hard copy every N updates, held fixed in between).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
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
            raise ValueError(f"decay={decay!r} must lie in [0, 1]: the weight on the old average (SCOPD 0.9999)")
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
            raise KeyError(f"EMA tensors changed since the first update: missing {missing}, unexpected {extra}")
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
        """Returns {"decay", "num_updates", "shadow"} for the checkpoint (shadow tensors are not copied): plain data
        only (numbers and tensors), which is all a resume state may hold (``checkpoint.load_plain``)."""
        return {"decay": self._decay, "num_updates": self._num_updates, "shadow": dict(self._shadow)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Returns None; restores a ``state_dict``. A different decay is an error (it defines the run).

        Args:
            state: the mapping ``state_dict`` returned, e.g. read back as plain data by ``checkpoint.load_state``.
        """
        if float(state["decay"]) != self._decay:
            raise ValueError(
                f"checkpoint EMA decay={state['decay']!r} differs from the configured decay={self._decay!r}; "
                "resume with the decay the run started with"
            )
        self._num_updates = int(state["num_updates"])
        self._shadow = {name: t.detach().to(torch.float32, copy=True) for name, t in state["shadow"].items()}


class PeriodicCopy:
    """Hard copy of named tensors every ``interval`` updates (the progressive teacher), on ``ParameterEMA``.

    Same interface as ``ParameterEMA`` (``update``, ``swapped``, ``state_dict``, ``load_state_dict``), so the
    loop calls it after every optimizer step exactly like the EMA.
    """

    def __init__(self, interval: int, params: Mapping[str, torch.Tensor]) -> None:
        """Creates the copy holding ``params``' current values θ_0 (the teacher until the first refresh).

        Args:
            interval: N >= 1, optimizer steps between copies (N = 1: the teacher is last step's student).
            params: {name: tensor} the initial values of the trainable tensors; copied, not kept.
        """
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(f"interval={interval!r} must be an integer >= 1: optimizer steps between copies")
        self._interval = interval
        self._steps = 0
        self._copy = ParameterEMA(0.0)  # d = 0: an update is an exact copy (0·s + 1·θ)
        self._copy.update(params)

    @property
    def interval(self) -> int:
        """N, the optimizer steps between copies."""
        return self._interval

    @property
    def num_updates(self) -> int:
        """How many times ``update`` ran (optimizer steps since the start)."""
        return self._steps

    def shadow(self) -> dict[str, torch.Tensor]:
        """Returns the {name: fp32 tensor} teacher values (not a copy)."""
        return self._copy.shadow()

    def update(self, params: Mapping[str, torch.Tensor]) -> None:
        """Returns None; counts one optimizer step and copies ``params`` when the count is a multiple of N.

        Args:
            params: {name: tensor} current student values, same names and shapes as at construction.
        """
        self._steps += 1
        if self._steps % self._interval == 0:
            self._copy.update(params)

    def swapped(self, params: Mapping[str, torch.Tensor]) -> AbstractContextManager[None]:
        """Returns a context in which ``params`` hold the last copy; their exact values come back on exit."""
        return self._copy.swapped(params)

    def state_dict(self) -> dict[str, Any]:
        """Returns {"interval", "num_updates", "copy"} for the checkpoint."""
        return {"interval": self._interval, "num_updates": self._steps, "copy": self._copy.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Returns None; restores a ``state_dict``. A different interval is an error (it defines the run)."""
        if int(state["interval"]) != self._interval:
            raise ValueError(
                f"checkpoint progressive-teacher interval={state['interval']!r} differs from the configured "
                f"interval={self._interval!r}; resume with the interval the run started with"
            )
        self._steps = int(state["num_updates"])
        self._copy.load_state_dict(state["copy"])
