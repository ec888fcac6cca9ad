"""Budget schedules: the student's retention fraction r(s) at optimizer step s.

A budget is always a fraction in (0, 1] of an image's post-merger visual tokens; turn it into a per-image
count with ``sparsectx.budget.tokens_to_keep`` (round after multiplying by that image's N, LT-OPD §3.3).
Steps are optimizer steps counted from 0. Keys:

- ``constant``: r(s) = budget (SCOPD, SCOPD+).
- ``cosine_curriculum``: LT-OPD's cosine decay from ``start_budget`` to ``final_budget``, then hold (seed 000
  §3.3, where the equation itself is missing from the text; only "α is set to 2" and "β is the final keep
  ratio" survive). Two readings of α (training-methods spec §4), chosen by ``shape``:

  * ``"power"`` (reading A, the spec's and our default; set it in YAML): S_d = decay_fraction·S_total,
    u = min(1, s/S_d), r(s) = r_end + (r_start - r_end)·[½(1 + cos πu)]^α.
  * ``"horizon"`` (reading B): S_d = S_total/α, plain cosine r(s) = r_end + (r_start - r_end)·½(1 + cos πu);
    ``decay_fraction`` must be null because α sets the horizon.

  Reading A is the default because the decay horizon stays its own knob and α=2 then only reshapes the curve
  (a faster early drop), so the LT-OPD "hold" phase is not silently tied to α.
- ``epic_progressive``: EPIC's token-consistency curriculum (spec §5.3) expressed in budgets: at progress
  p = s/S_total the student budget is drawn uniformly from [lo(p), hi(p)], both interpolated linearly from
  ``start_budget`` to ``final_min_budget`` / ``final_max_budget``. The released values are 0.9 → [0.26, 0.74];
  ``epic_teacher_budget`` gives the teacher's milder budget.
"""

from __future__ import annotations

import math
from typing import Literal, Protocol

import torch

from sparsectx.budget import check_budget
from sparsectx.registry import Registry

CurriculumShape = Literal["power", "horizon"]


class BudgetSchedule(Protocol):
    """Signature every schedule implements (extra keyword arguments come from the schedule's YAML)."""

    def __call__(
        self, step: int, *, total_steps: int, generator: torch.Generator | None, **params: float | str | None
    ) -> float:
        """Returns the student's budget fraction in (0, 1] at optimizer step ``step``."""
        ...


BUDGET_SCHEDULES: Registry[BudgetSchedule] = Registry("budget schedule")


def _check_steps(step: int, total_steps: int) -> None:
    if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1:
        raise ValueError(f"total_steps={total_steps!r} must be an int >= 1 (optimizer steps in the run)")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step={step!r} must be an int >= 0 (optimizer steps done so far)")


@BUDGET_SCHEDULES.register("constant")
def constant(step: int, *, total_steps: int, generator: torch.Generator | None, budget: float) -> float:
    """Returns ``budget`` at every step (SCOPD: b = 10%).

    Args:
        step: optimizer step, from 0.
        total_steps: optimizer steps in the run (checked, otherwise unused).
        generator: unused.
        budget: the retention fraction in (0, 1].
    """
    _check_steps(step, total_steps)
    return check_budget(budget, "budget")


def check_cosine_curriculum(
    *, start_budget: float, final_budget: float, alpha: float, decay_fraction: float | None, shape: str
) -> None:
    """Returns None if the LT-OPD curriculum fields are consistent; otherwise raises ValueError naming them.

    Args:
        start_budget: r_start in (0, 1].
        final_budget: r_end in (0, start_budget].
        alpha: α > 0 (2 in LT-OPD); reading B needs α >= 1 so the horizon fits in the run.
        decay_fraction: S_d / S_total in (0, 1] for shape "power"; must be None for shape "horizon".
        shape: "power" (reading A) or "horizon" (reading B).
    """
    check_budget(start_budget, "start_budget")
    check_budget(final_budget, "final_budget")
    if final_budget > start_budget:
        raise ValueError(
            f"final_budget={final_budget!r} is above start_budget={start_budget!r}: the curriculum only "
            "lowers the budget; set final_budget <= start_budget (use schedule 'constant' for a fixed budget)"
        )
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0:
        raise ValueError(f"alpha={alpha!r} must be > 0 (LT-OPD uses 2)")
    if shape == "power":
        if decay_fraction is None or not 0.0 < float(decay_fraction) <= 1.0:
            raise ValueError(
                f"decay_fraction={decay_fraction!r} must lie in (0, 1] for shape='power': the share of steps "
                "over which the budget decays before it is held"
            )
    elif shape == "horizon":
        if decay_fraction is not None:
            raise ValueError(
                f"decay_fraction={decay_fraction!r} must be null for shape='horizon': the decay lasts "
                "total_steps/alpha steps; set decay_fraction: null or use shape: power"
            )
        if alpha < 1:
            raise ValueError(
                f"alpha={alpha!r} must be >= 1 for shape='horizon' (decay over total_steps/alpha)"
            )
    else:
        raise ValueError(f"shape={shape!r} must be 'power' (reading A, default) or 'horizon' (reading B)")


@BUDGET_SCHEDULES.register("cosine_curriculum")
def cosine_curriculum(
    step: int,
    *,
    total_steps: int,
    generator: torch.Generator | None,
    start_budget: float,
    final_budget: float,
    alpha: float,
    decay_fraction: float | None,
    shape: CurriculumShape,
) -> float:
    """Returns LT-OPD's curriculum budget r(s): cosine decay from start to final, then hold (seed 000 §3.3).

    shape "power" (reading A): r = r_end + (r_start - r_end)·[½(1 + cos(π·min(1, s/S_d)))]^α,
    S_d = decay_fraction·total_steps. shape "horizon" (reading B): the same with exponent 1 and
    S_d = total_steps/α. For s >= S_d the budget is held at r_end.

    Args:
        step: optimizer step s, from 0 (s = 0 gives start_budget).
        total_steps: optimizer steps in the run, S_total.
        generator: unused (the curriculum is deterministic).
        start_budget: r_start in (0, 1].
        final_budget: r_end in (0, start_budget] (0.05 in LT-OPD).
        alpha: α (2 in LT-OPD); exponent in reading A, horizon divisor in reading B.
        decay_fraction: S_d / S_total for reading A; None for reading B.
        shape: "power" (reading A) or "horizon" (reading B).
    """
    _check_steps(step, total_steps)
    check_cosine_curriculum(
        start_budget=start_budget,
        final_budget=final_budget,
        alpha=alpha,
        decay_fraction=decay_fraction,
        shape=shape,
    )
    if shape == "power":
        decay_steps = float(decay_fraction) * total_steps  # type: ignore[arg-type]  # not None: checked
        exponent = float(alpha)
    else:
        decay_steps = total_steps / float(alpha)
        exponent = 1.0
    u = min(1.0, step / decay_steps)
    factor = (0.5 * (1.0 + math.cos(math.pi * u))) ** exponent
    return float(final_budget) + (float(start_budget) - float(final_budget)) * factor


@BUDGET_SCHEDULES.register("epic_progressive")
def epic_progressive(
    step: int,
    *,
    total_steps: int,
    generator: torch.Generator | None,
    start_budget: float,
    final_min_budget: float,
    final_max_budget: float,
) -> float:
    """Returns EPIC's student budget ~ U[lo(p), hi(p)] at progress p = min(1, s/S_total) (spec §5.3).

    lo(p) = start + (final_min - start)·p and hi(p) = start + (final_max - start)·p. EPIC's released TCD uses
    reduction ratios max_red = 0.1 + 0.64p and min_red = 0.1 + 0.16p, i.e. start 0.9, final_min 0.26,
    final_max 0.74; rescale final_min to your deployment budget (the released one never reaches it).

    Args:
        step: optimizer step s, from 0.
        total_steps: optimizer steps in the run.
        generator: the draw's only randomness; seed it identically on every rank so ranks agree.
        start_budget: budget at p = 0, in (0, 1].
        final_min_budget: lower end at p = 1, in (0, final_max_budget].
        final_max_budget: upper end at p = 1, in [final_min_budget, start_budget].
    """
    _check_steps(step, total_steps)
    for key, value in (
        ("start_budget", start_budget),
        ("final_min_budget", final_min_budget),
        ("final_max_budget", final_max_budget),
    ):
        check_budget(value, key)
    if not final_min_budget <= final_max_budget <= start_budget:
        raise ValueError(
            f"need final_min_budget <= final_max_budget <= start_budget, got {final_min_budget!r}, "
            f"{final_max_budget!r}, {start_budget!r}: the budget range only shrinks downwards"
        )
    if generator is None:
        raise ValueError("schedule 'epic_progressive' draws the budget; pass a seeded torch.Generator")
    p = min(1.0, step / total_steps)
    low = start_budget + (final_min_budget - start_budget) * p
    high = start_budget + (final_max_budget - start_budget) * p
    draw = float(torch.rand((), generator=generator, device=generator.device))
    return low + (high - low) * draw


def epic_teacher_budget(
    student_budget: float, *, step: int, total_steps: int, gap_start: float, gap_slope: float, gap_max: float
) -> float:
    """Returns EPIC's teacher budget min(1, b_student + min(gap_start + gap_slope·p, gap_max)), p = s/S_total.

    EPIC's released TCD uses gap(p) = min(0.1 + 0.5p, 0.3) on reduction ratios (spec §5.3).

    Args:
        student_budget: the student's budget this step, in (0, 1].
        step: optimizer step s, from 0.
        total_steps: optimizer steps in the run.
        gap_start: gap at p = 0, >= 0.
        gap_slope: gap growth per unit progress, >= 0.
        gap_max: cap on the gap, >= gap_start.
    """
    _check_steps(step, total_steps)
    check_budget(student_budget, "student_budget")
    if not 0.0 <= gap_start <= gap_max or gap_slope < 0:
        raise ValueError(
            f"need 0 <= gap_start <= gap_max and gap_slope >= 0, got gap_start={gap_start!r}, "
            f"gap_slope={gap_slope!r}, gap_max={gap_max!r}"
        )
    p = min(1.0, step / total_steps)
    return min(1.0, student_budget + min(gap_start + gap_slope * p, gap_max))
