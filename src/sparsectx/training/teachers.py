"""Teachers: who scores the prefix, with the full visual context or their own milder selection (spec §1.8).

Each registry entry is a context manager that, given the ``Student``, yields the adapter whose forward is the
teacher; ``teacher_logits`` runs it in eval mode under ``no_grad``. Keys (``method.teacher.kind``):

- ``frozen``: the initial model. With LoRA, the same model inside ``PeftModel.disable_adapter()`` (base
  weights, no second copy); without LoRA, the frozen copy taken before the first step.
- ``ema``: the EMA of the trainable tensors swapped into the live model for the pass and restored bit-exactly
  after (``ParameterEMA.swapped``). Lazy init: before the first update the teacher is the current student.
- ``shared``: the current student itself (the paper's collapsing "shared" ablation).
- ``trust_region``: the ``frozen`` view; the loop then interpolates its logits towards the current
  student's at the same full context (``trust_region_logits``; spec §1.8, LT-OPD Table 7).
- ``progressive``: the last hard copy of the student (every N optimizer steps, ``PeriodicCopy``) swapped in
  like the EMA; before the first copy it is the initial model.

SCOPD+GT is not a separate kind: ``method.teacher.reference_in_prompt`` gives any kind a prompt that also
holds the reference answer (built by ``sparsectx.training.batches.reencode_text``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import torch

from sparsectx.context import build_context, keep_all
from sparsectx.encoding import EncodedSample
from sparsectx.generation import response_logits
from sparsectx.models.adapter import VLMAdapter
from sparsectx.registry import Registry
from sparsectx.training.student import Student, mode
from sparsectx.training.vision_training import VisionInputs, teacher_samples
from sparsectx.visual import Selection

TeacherView = Callable[[Student], AbstractContextManager[VLMAdapter]]

TEACHERS: Registry[TeacherView] = Registry("teacher")


@TEACHERS.register("frozen")
@contextmanager
def frozen_teacher(student: Student) -> Iterator[VLMAdapter]:
    """Yields the initial model: adapters disabled (LoRA) or the frozen copy (full parameters)."""
    if student.peft is not None:
        with student.peft.disable_adapter():
            yield student.adapter
        return
    if student.frozen is None:
        raise RuntimeError("teacher 'frozen' without LoRA needs the frozen copy; build_student did not make one")
    yield student.frozen


@TEACHERS.register("ema")
@contextmanager
def ema_teacher(student: Student) -> Iterator[VLMAdapter]:
    """Yields the student with its averaged tensors swapped in (restored exactly on exit): the EMA, or for
    ``progressive`` the last hard copy (``PeriodicCopy``, an EMA with decay 0 every N-th update)."""
    if student.ema is None:
        raise RuntimeError(
            "teacher 'ema'/'progressive' needs the student's ParameterEMA or PeriodicCopy; build_student made none"
        )
    with student.ema.swapped(student.trainable):
        yield student.adapter


TEACHERS.register("progressive")(ema_teacher)


TEACHERS.register("trust_region")(frozen_teacher)


@TEACHERS.register("shared")
@contextmanager
def shared_teacher(student: Student) -> Iterator[VLMAdapter]:
    """Yields the current student itself."""
    yield student.adapter


# Views whose weights are the live model's current tensors (the EMA swapped in, or the student itself): a
# plain-weight twin refreshed inside the view holds the same teacher (``frozen`` under LoRA disables the
# adapters instead, which a merge would not see).
TWIN_VIEWS = frozenset({"ema", "progressive", "shared"})


def trust_region_logits(reference: torch.Tensor, current: torch.Tensor, lam: float) -> torch.Tensor:
    """Returns (B, T, V) fp32 trust-region teacher logits (1 - λ)·z_ref + λ·z_cur = lerp(z_ref, z_cur, λ).

    The interpolation is in logit space, as the SDPO-lineage ``TrustRegionTeacher`` (Vision-OPD's dp_actor;
    training-methods spec §1.8: ``lerp(ref_logits, student_logits, λ)``); λ = 0 is the frozen teacher, λ = 1
    the current student (the collapsing "shared" teacher).

    Args:
        reference: (B, T, V) detached logits of the frozen initial model at the full visual context.
        current: (B, T, V) detached logits of the current student at the same context and prefix.
        lam: λ in [0, 1].
    """
    return torch.lerp(reference.float(), current.float(), float(lam))


def teacher_logits(
    student: Student,
    kind: str,
    samples: list[EncodedSample],
    responses: list[torch.Tensor],
    twin: Callable[[], VLMAdapter] | None = None,
    selections: list[list[Selection]] | None = None,
    vision: VisionInputs | None = None,
) -> torch.Tensor:
    """Returns (B, T, V) detached teacher logits at the response positions (eval, no_grad).

    The context is built inside the teacher view, so its text embeddings are the teacher's own (they differ
    from the student's for a full-parameter frozen copy or EMA).

    Args:
        student: the trained model and its companions.
        kind: ``method.teacher.kind`` (a ``TEACHERS`` key).
        samples: the teacher's encoded prompts.
        responses: per sample, (T_i,) int64 prefix ids.
        twin: for a ``TWIN_VIEWS`` kind, returns the plain-weight twin refreshed to the model's current
            tensors (``teacher_weights=copy``: no adapter layers in the forward); None runs the live model.
        selections: per sample, the teacher's own per-image selection (EPIC's milder budget), or None to
            keep every visual token (the full context).
        vision: the micro-batch's pixels when the tower trains (``method.train_vision``): every view but
            ``shared`` (the current student, whose vectors ``samples`` already hold) recomputes its own
            tower's vectors; None keeps ``samples``' vectors.
    """
    view = TEACHERS.get(kind)
    with torch.no_grad(), view(student) as live, student.compute():
        adapter = twin() if twin is not None and kind in TWIN_VIEWS else live
        with mode(adapter.model, training=False):
            if vision is not None and kind != "shared":
                samples = teacher_samples(adapter, samples, vision)
            kept = selections if selections is not None else [keep_all(s) for s in samples]
            batch = build_context(adapter, samples, kept, responses)
            logits, _ = response_logits(adapter, batch)
    return logits.detach()
