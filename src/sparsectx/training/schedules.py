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
- ``epic_progressive``: EPIC's token-consistency curriculum (spec §5.3) expressed in budgets (budget = 1 −
  EPIC's reduction ratio): at progress p = min(1, s/S_total) the student budget is drawn uniformly from the
  window [hard(p), easy(p)], hard(p) = start − (start − final)·p and easy(p) = start − easy_share·(start −
  final)·p. EPIC's released TCD (``ZichenWen1/EPIC:llava/train/llava_trainer_KD_from_pretrain_*.py``,
  ``compute_loss``) uses reductions max_red = 0.1 + 0.8·0.8p and min_red = 0.1 + 0.8·0.2p: start 0.9,
  final 0.26, easy_share 0.25. That never reaches the evaluation compression, so the presets rescale it
  (spec §5.3, §8): final = the deployment budget, both window edges stretched by the same factor.
  ``epic_teacher_budget`` gives the teacher's milder budget b + gap(p).
- ``uniform``: a fresh draw budget ~ U[min_budget, max_budget] every step, the window never moving: EPIC's layer
  consistency distillation (LCD) samples r_stu ~ U(r_min, r_max), r_min = 0.2, r_max = 0.9 (arXiv 2510.00515
  §3.4, Eq. 10), i.e. budgets in [0.1, 0.8].

Layer schedules (``LAYER_SCHEDULES``, ``method.layer_schedule``) move an in-LLM pruner's layer K over training
instead; K = the LLM's depth L drops nothing (every layer sees every token). Key:

- ``epic_deep_to_shallow``: EPIC's LCD (arXiv 2510.00515 §3.4, Eq. 9): ℓ_t = Round(L − β_t·(L − ℓ_min)),
  β_t = t/T, from ℓ_0 = L (compression after the last layer) to ℓ_T = ℓ_min, one layer for student and teacher.
  ℓ_min is the pruner's own ``pruner.layer`` (the layer evaluation prunes at; the paper's "w/o progressive
  compression layer" ablation fixes the 2nd layer, Table 4, and its release prunes at K = 2). The released code
  has no LCD (``ZichenWen1/EPIC:README.md`` lists its release as still to come). Round is half up (ours: the
  paper does not say which; a tie only decides the one step where it falls).
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


class LayerSchedule(Protocol):
    """Signature every layer schedule implements (``method.layer_schedule``)."""

    def __call__(self, step: int, *, total_steps: int, num_layers: int, final_layer: int) -> int:
        """Returns the in-LLM pruning layer K in [final_layer, num_layers] at optimizer step ``step``."""
        ...


LAYER_SCHEDULES: Registry[LayerSchedule] = Registry("layer schedule")


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
            raise ValueError(f"alpha={alpha!r} must be >= 1 for shape='horizon' (decay over total_steps/alpha)")
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
    final_budget: float,
    easy_share: float,
) -> float:
    """Returns EPIC's student budget ~ U[hard(p), easy(p)] at progress p = min(1, s/S_total) (spec §5.3).

    hard(p) = start − (start − final)·p ends at ``final_budget``; easy(p) = start − easy_share·(start −
    final)·p moves ``easy_share`` as far. In reduction ratios (1 − budget) EPIC's released rule is
    red ~ U[0.1 + 0.16p, 0.1 + 0.64p]: start 0.9, final 0.26, easy_share 0.25. Setting final to the
    deployment budget (0.1, 0.05) is the spec's rescaling: the same window shape, reaching the budget at p=1.

    Args:
        step: optimizer step s, from 0 (EPIC's ``global_step``).
        total_steps: optimizer steps in the run (EPIC's ``max_steps``).
        generator: the draw's only randomness; seed it identically on every rank so ranks agree.
        start_budget: both window edges at p = 0, in (0, 1] (0.9 in EPIC).
        final_budget: the harder edge at p = 1, in (0, start_budget].
        easy_share: how far the easier edge moves relative to the harder one, in [0, 1] (0.25 in EPIC).
    """
    _check_steps(step, total_steps)
    check_budget(start_budget, "start_budget")
    check_budget(final_budget, "final_budget")
    if final_budget > start_budget:
        raise ValueError(
            f"final_budget={final_budget!r} is above start_budget={start_budget!r}: EPIC's window only moves "
            "towards harder budgets; set final_budget <= start_budget"
        )
    if isinstance(easy_share, bool) or not isinstance(easy_share, (int, float)) or not 0 <= easy_share <= 1:
        raise ValueError(
            f"easy_share={easy_share!r} must lie in [0, 1]: the easier window edge moves that share of the "
            "harder edge's distance (EPIC: 0.2/0.8 = 0.25)"
        )
    if generator is None:
        raise ValueError("schedule 'epic_progressive' draws the budget; pass a seeded torch.Generator")
    p = min(1.0, step / total_steps)
    span = float(start_budget) - float(final_budget)
    hard = float(start_budget) - span * p
    easy = float(start_budget) - float(easy_share) * span * p
    draw = float(torch.rand((), generator=generator, device=generator.device))
    # EPIC's random.uniform(min_red, max_red) = min_red + (max_red - min_red)·u, i.e. from the easy edge.
    return easy + (hard - easy) * draw


def check_epic_gap(*, gap_start: float, gap_slope: float, gap_max: float, key: str) -> None:
    """Returns None if EPIC's teacher gap fields are usable; otherwise raises ValueError naming ``key``.

    A gap <= 0 gives a teacher no milder than the student; a gap >= 1 puts every teacher budget above 1.

    Args:
        gap_start: gap at p = 0, in (0, gap_max].
        gap_slope: growth per unit progress, >= 0.
        gap_max: the cap, in [gap_start, 1).
        key: the dotted config key of the three fields (for the message).
    """
    values = {"start": gap_start, "slope": gap_slope, "max": gap_max}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{key}.{name}={value!r} must be a finite number")
    if not gap_start > 0:
        raise ValueError(
            f"{key}.start={gap_start!r} must be > 0: the teacher's budget b + gap would not be above the "
            "student's b (EPIC: 0.1)"
        )
    if gap_slope < 0:
        raise ValueError(f"{key}.slope={gap_slope!r} must be >= 0: EPIC's gap only grows (0.5)")
    if not gap_start <= gap_max < 1:
        raise ValueError(
            f"{key}.max={gap_max!r} must lie in [start={gap_start!r}, 1): a gap of 1 or more makes the "
            "teacher's budget b + gap exceed 1 for every student budget (EPIC: 0.3); for a teacher that "
            "keeps every visual token set method.teacher.budget_gap=null"
        )


def epic_teacher_budget(
    student_budget: float, *, step: int, total_steps: int, gap_start: float, gap_slope: float, gap_max: float
) -> float:
    """Returns EPIC's teacher budget min(1, b_student + min(gap_start + gap_slope·p, gap_max)), p = s/S_total.

    EPIC's released TCD uses gap(p) = min(0.1 + 0.5p, 0.3) on reduction ratios and clamps the teacher's
    reduction at 0 (``max(student_red − gap, 0)``), hence the cap at the full context (spec §5.3).

    Args:
        student_budget: the student's budget this step, in (0, 1].
        step: optimizer step s, from 0.
        total_steps: optimizer steps in the run.
        gap_start: gap at p = 0, > 0.
        gap_slope: gap growth per unit progress, >= 0.
        gap_max: cap on the gap, in [gap_start, 1).
    """
    _check_steps(step, total_steps)
    check_budget(student_budget, "student_budget")
    check_epic_gap(gap_start=gap_start, gap_slope=gap_slope, gap_max=gap_max, key="gap")
    p = min(1.0, step / total_steps)
    return min(1.0, student_budget + min(gap_start + gap_slope * p, gap_max))


@BUDGET_SCHEDULES.register("uniform")
def uniform(
    step: int, *, total_steps: int, generator: torch.Generator | None, min_budget: float, max_budget: float
) -> float:
    """Returns a budget ~ U[min_budget, max_budget], drawn afresh every step (EPIC LCD, arXiv 2510.00515 Eq. 10).

    EPIC's LCD samples the student's reduction r ~ U(r_min, r_max) with r_min = 0.2 and r_max = 0.9 at every
    step of the run (the window does not move; the layer does, ``epic_deep_to_shallow``): budgets 1 − r in
    [0.1, 0.8]. The draw is u ~ U[0, 1) mapped as EPIC's ``random.uniform(min_red, max_red)``:
    budget = 1 − (min_red + (max_red − min_red)·u) = max_budget − (max_budget − min_budget)·u.

    Args:
        step: optimizer step, from 0 (checked, otherwise unused).
        total_steps: optimizer steps in the run (checked, otherwise unused).
        generator: the draw's only randomness; seed it identically on every rank so ranks agree.
        min_budget: the window's lower edge, in (0, max_budget] (0.1 in EPIC's LCD).
        max_budget: the window's upper edge, in (0, 1] (0.8 in EPIC's LCD).
    """
    _check_steps(step, total_steps)
    check_budget(min_budget, "min_budget")
    check_budget(max_budget, "max_budget")
    if min_budget > max_budget:
        raise ValueError(
            f"min_budget={min_budget!r} is above max_budget={max_budget!r}: the window is [min_budget, "
            "max_budget]; swap them (EPIC's LCD: min_budget 0.1, max_budget 0.8)"
        )
    if generator is None:
        raise ValueError("schedule 'uniform' draws the budget; pass a seeded torch.Generator")
    draw = float(torch.rand((), generator=generator, device=generator.device))
    return float(max_budget) - (float(max_budget) - float(min_budget)) * draw


def check_layer_range(*, num_layers: int, final_layer: int) -> None:
    """Returns None if an in-LLM layer schedule can end at ``final_layer``; otherwise raises ValueError.

    Args:
        num_layers: L, the LLM's decoder layers (>= 2).
        final_layer: the layer K the schedule ends at (``pruner.layer``), in [1, L − 1].
    """
    for name, value in (("num_layers", num_layers), ("final_layer", final_layer)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name}={value!r} must be an int")
    if not 1 <= final_layer < num_layers:
        raise ValueError(
            f"pruner.layer={final_layer} (the layer schedule's end) is outside [1, {num_layers - 1}] for a "
            f"{num_layers}-layer LLM; set pruner.layer lower"
        )


@LAYER_SCHEDULES.register("epic_deep_to_shallow")
def epic_deep_to_shallow(step: int, *, total_steps: int, num_layers: int, final_layer: int) -> int:
    """Returns EPIC's LCD layer ℓ_t = Round(L − p·(L − ℓ_min)), p = min(1, s/S_total) (arXiv 2510.00515 Eq. 9).

    The layer moves from L (p = 0: pruning after the last layer, i.e. no token dropped) down to ℓ_min =
    ``final_layer`` (p = 1), deep to shallow, linearly in progress. Layers are counted as ``pruner.layer`` is
    (K: layers 0..K-1 see every token), which is EPIC's ``pruned_layer`` (its DART/FastV prune when
    ``layer_idx == K``, so K = L never prunes). Round is half up, computed in integers so a tie never depends
    on float rounding: ℓ = L + ⌊(S − 2·n)/(2S)⌋ with n = min(s, S)·(L − ℓ_min).

    Args:
        step: optimizer step s, from 0 (EPIC's t).
        total_steps: optimizer steps in the run, S_total (EPIC's T).
        num_layers: L, the LLM's decoder layers.
        final_layer: ℓ_min, the shallowest layer, in [1, L − 1] (``pruner.layer``; 2 in EPIC).
    """
    _check_steps(step, total_steps)
    check_layer_range(num_layers=num_layers, final_layer=final_layer)
    moved = min(step, total_steps) * (num_layers - final_layer)  # p·(L − ℓ_min)·S_total, exact
    return num_layers + (total_steps - 2 * moved) // (2 * total_steps)
