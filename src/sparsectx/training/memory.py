"""Two of the ``memory.*`` switches: activation checkpointing and the offloaded frozen teacher.

Neither changes the numbers (tested on CPU in fp32): checkpointing recomputes the same forward in backward
(with the same RNG state), and offloading changes where the teacher copy's weights live and when its logits
are computed, not what they are. The third switch, 8-bit optimizer states, is ``update.build_optimizer``'s.

Offload phases of one optimizer step (``memory.teacher_offload``): rollouts with the student; then the frozen
copy goes to the device ONCE, scores the prefixes of every micro-batch, and goes back to the CPU (the device
cache is emptied); its logits wait on the CPU, since a step's worth of (B, T, V) logits (~12 GB at 7B, micro
batch 8, 512 tokens, 10 micro-batches, bf16) would take back most of what the offload frees; then each
micro-batch's student pass fetches its own. Without offload the teacher runs inside ``steps.micro_loss``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from sparsectx.training.config import MemoryConfig
from sparsectx.training.contexts import MicroBatch
from sparsectx.training.student import Student
from sparsectx.training.teachers import teacher_logits


def enable_activation_checkpointing(model: nn.Module) -> None:
    """Returns None after making ``model``'s decoder layers recompute their forward in backward.

    HF's non-reentrant checkpointing acts only in train mode, so it covers the student's gradient pass and
    leaves rollouts, teacher and probe passes (eval mode, no_grad) as they were. With LoRA the adapters sit
    inside the HF model's modules, so the same call covers them. The backward must also run in train mode
    (``update.accumulate_gradients``), or a recomputed dropout would differ from the forward's.
    """
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def apply_memory(student: Student, memory: MemoryConfig) -> None:
    """Returns None after applying ``memory.activation_checkpointing`` and ``memory.teacher_offload``.

    Call it once, after ``build_student`` (the frozen copy must be taken before checkpointing is switched
    on, so the copy stays a plain model).
    """
    if memory.activation_checkpointing:
        enable_activation_checkpointing(student.model)
    if memory.teacher_offload:
        if student.frozen is None:
            raise RuntimeError("memory.teacher_offload needs the frozen copy; build_student did not make one")
        student.frozen.model.to("cpu")


@contextmanager
def on_device(model: nn.Module, device: torch.device) -> Iterator[nn.Module]:
    """Yields ``model`` moved to ``device``; on exit it is back on the CPU and the CUDA cache is emptied."""
    model.to(device)
    try:
        yield model
    finally:
        model.to("cpu")
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()


def offloaded_teacher_logits(student: Student, kind: str, micro: list[MicroBatch]) -> list[torch.Tensor]:
    """Returns per micro-batch its (B, T, V) teacher logits, on the CPU, from one teacher phase.

    The frozen copy moves to the student's device once for all micro-batches and back to the CPU after.

    Args:
        student: the trained model; ``student.frozen`` is the offloaded copy.
        kind: ``method.teacher.kind`` (``frozen``, checked by ``MemoryConfig.check_method``).
        micro: the step's prepared micro-batches.
    """
    if student.frozen is None:
        raise RuntimeError("memory.teacher_offload needs the frozen copy; build_student did not make one")
    with on_device(student.frozen.model, student.model.device):
        return [
            teacher_logits(
                student, kind, mb.teacher_encoded, mb.prefix.tokens, None, mb.teacher_selections, mb.vision
            ).cpu()
            for mb in micro
        ]
