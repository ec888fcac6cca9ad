"""Typed schema of ``method.teacher``: who scores the prefix with the full visual context, and EPIC's gap.

Split from ``sparsectx.training.method`` (the other method parts); the same rules: every field required,
each ``__post_init__`` names the full dotted key, the value and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparsectx.checks import check_choice
from sparsectx.training.schedules import check_epic_gap

TEACHER_KINDS = ("frozen", "ema", "shared", "trust_region", "progressive", "none")
"""``frozen``: the initial model; ``ema``: EMA of the trainable tensors; ``shared``: the student itself;
``trust_region``: the frozen model's logits interpolated towards the current student's; ``progressive``: a
hard copy of the student every N optimizer steps; ``none``: no teacher (SFT only)."""


@dataclass
class TeacherGapConfig:
    """``method.teacher.budget_gap``: the teacher's own pruned context at budget min(1, b + gap(p)) (EPIC).

    gap(p) = min(start + slope·p, max) at progress p = step / steps; the pruner re-selects at that budget
    (EPIC's teacher forward re-runs its pruner at the milder ratio; spec §5.3).
    """

    start: float
    """gap at p = 0, > 0 (EPIC: 0.1)."""
    slope: float
    """growth per unit progress, >= 0 (EPIC: 0.5)."""
    max: float
    """cap on the gap, in [start, 1) (EPIC: 0.3)."""

    def __post_init__(self) -> None:
        check_epic_gap(gap_start=self.start, gap_slope=self.slope, gap_max=self.max, key="method.teacher.budget_gap")


@dataclass
class TeacherConfig:
    """``method.teacher``: who scores the prefix with the full visual context."""

    kind: str
    """frozen | ema | shared | trust_region | progressive | none (see ``TEACHER_KINDS``)."""
    ema_decay: float | None
    """EMA decay d (weight on the old average), for kind ``ema`` only; null otherwise."""
    trust_region_lambda: float | None
    """λ in [0, 1] for kind ``trust_region`` only: teacher logits z = (1 - λ)·z_frozen + λ·z_student, in logit
    space, both at the full visual context (spec §1.8); null otherwise."""
    update_interval: int | None
    """N >= 1 for kind ``progressive`` only: optimizer steps between hard copies of the student into the
    teacher (``PeriodicCopy``); null otherwise."""
    reference_in_prompt: bool
    """SCOPD+GT: the teacher's prompt also holds the reference answer (pruners never see it)."""
    reference_template: str
    """Text appended to the teacher's user turn when ``reference_in_prompt``; ``{reference}`` is replaced."""
    budget_gap: TeacherGapConfig | None
    """The teacher sees its own pruned context at min(1, b + gap(p)) (EPIC); null = every visual token kept."""

    def __post_init__(self) -> None:
        check_choice(self.kind, TEACHER_KINDS, "method.teacher.kind")
        if self.budget_gap is not None and self.kind == "none":
            raise ValueError("method.teacher.budget_gap is set but method.teacher.kind=none; set it to null")
        if self.kind == "ema":
            if self.ema_decay is None or not 0.0 <= self.ema_decay <= 1.0:
                raise ValueError(f"method.teacher.ema_decay={self.ema_decay!r} must lie in [0, 1] for kind=ema")
        elif self.ema_decay is not None:
            raise ValueError(f"method.teacher.ema_decay={self.ema_decay!r} must be null unless kind=ema")
        lam, interval = self.trust_region_lambda, self.update_interval
        _check_knob(self.kind, "trust_region", lam, "method.teacher.trust_region_lambda")
        if lam is not None and (isinstance(lam, bool) or not 0.0 <= lam <= 1.0):
            raise ValueError(
                f"method.teacher.trust_region_lambda={lam!r} must lie in [0, 1] (0 = the frozen teacher, "
                "1 = the current student)"
            )
        _check_knob(self.kind, "progressive", interval, "method.teacher.update_interval")
        if interval is not None and (isinstance(interval, bool) or not isinstance(interval, int) or interval < 1):
            raise ValueError(
                f"method.teacher.update_interval={interval!r} must be an integer >= 1 (optimizer steps between copies)"
            )
        if self.reference_in_prompt and "{reference}" not in self.reference_template:
            raise ValueError("method.teacher.reference_template must contain '{reference}'")


def _check_knob(kind: str, owner: str, value: Any, key: str) -> None:
    """Raises ValueError unless ``value`` is set exactly when ``method.teacher.kind`` is ``owner``."""
    if kind == owner and value is None:
        raise ValueError(f"{key} is null but method.teacher.kind={owner} needs it; set {key}=<value>")
    if kind != owner and value is not None:
        raise ValueError(f"{key}={value!r} must be null unless method.teacher.kind={owner}")
