"""The trained model and what the teachers need from it: LoRA or full parameters, a frozen copy, the EMA.

A frozen teacher with LoRA is the base weights under peft's ``disable_adapter()`` (no second copy). Without
LoRA (LT-OPD's full-parameter updates) it is a separate frozen copy taken before the first step. The EMA
teacher keeps an fp32 average of exactly the trainable tensors (adapter weights only with LoRA).

Precision: trainable tensors are always fp32 (peft keeps LoRA adapters in fp32; full-parameter training
upcasts the language model's weights), so small updates are not lost to bf16 rounding (an Adam step of 2e-6
is ~1% of bf16's spacing at a weight of 0.03). With a half-precision checkpoint every forward then runs under
``torch.autocast`` in that dtype (``Student.compute``); the exported checkpoint is cast back to it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

import torch
from peft import PeftModel
from torch import nn

from sparsectx.models import LoadedModel, adapter_for
from sparsectx.models.adapter import VLMAdapter
from sparsectx.models.processor import ImageTextProcessor
from sparsectx.training.ema import ParameterEMA, PeriodicCopy
from sparsectx.training.lora import apply_lora, freeze_all_but_language_model, trainable_named
from sparsectx.training.method import MethodConfig
from sparsectx.training.vision_training import check_trainable_tower


@dataclass
class Student:
    """The model being trained and its teacher-side companions.

    Attributes:
        adapter: the student's adapter; with LoRA its model holds the adapter layers in place.
        processor: the checkpoint's processor.
        peft: the peft wrapper (LoRA), or None for full-parameter training.
        frozen: adapter of a frozen copy of the initial model (full-parameter + frozen teacher only); on the
            CPU outside the step's teacher phase with ``memory.teacher_offload`` (``training.memory``).
        ema: the EMA of the trainable tensors (teacher kind ``ema``), or their hard copy every N steps
            (kind ``progressive``); None otherwise.
        trainable: {name: parameter} of every trained tensor (fp32), in a fixed order.
        dtype: the checkpoint's dtype; forwards autocast to it when it is half precision.
    """

    adapter: VLMAdapter
    processor: ImageTextProcessor
    peft: PeftModel | None
    frozen: VLMAdapter | None
    ema: ParameterEMA | PeriodicCopy | None
    trainable: dict[str, nn.Parameter]
    dtype: torch.dtype

    @property
    def model(self) -> nn.Module:
        """Returns the HF model the student adapter runs (adapter layers included)."""
        return self.adapter.model

    def compute(self) -> AbstractContextManager[None]:
        """Returns the context every forward runs in: autocast to a half-precision checkpoint dtype."""
        if self.dtype == torch.float32:
            return nullcontext()
        return torch.autocast(device_type=self.model.device.type, dtype=self.dtype)


def build_student(loaded: LoadedModel, method: MethodConfig, signal_chunk: int) -> Student:
    """Returns the ``Student`` for ``method``: LoRA or full parameters, plus the teacher's frozen copy or EMA.

    Args:
        loaded: the freshly loaded model (eval mode, on its device) and processor.
        method: the method config (LoRA settings, teacher kind, EMA decay).
        signal_chunk: ``model.signal_chunk``, for the frozen copy's adapter.
    """
    hf_model = loaded.adapter.model
    dtype = hf_model.dtype
    hf_model.requires_grad_(False)
    frozen = None
    if method.lora.enabled:
        peft = apply_lora(hf_model, method.lora)
    else:
        peft = None
        if method.teacher.kind in ("frozen", "trust_region"):  # trust_region's reference is the frozen model
            copy_model = copy.deepcopy(hf_model).eval().requires_grad_(False)
            frozen = adapter_for(copy_model, signal_chunk)
        if method.train_vision:  # LT-OPD: the vision encoder and merger train too (seed 000 App. B)
            check_trainable_tower(loaded.adapter)
            hf_model.requires_grad_(True)
        else:
            freeze_all_but_language_model(hf_model)
    trainable = trainable_named(hf_model)
    for param in trainable.values():  # fp32 master weights (peft already made the adapters fp32)
        param.data = param.data.float()
    ema = ParameterEMA(method.teacher.ema_decay) if method.teacher.kind == "ema" else None
    if method.teacher.kind == "progressive":  # θ_0 copied now: the teacher until step N
        ema = PeriodicCopy(method.teacher.update_interval, trainable)
    return Student(loaded.adapter, loaded.processor, peft, frozen, ema, trainable, dtype)


@contextmanager
def mode(model: nn.Module, training: bool) -> Iterator[None]:
    """Returns a context in which ``model`` is in train (or eval) mode; the old mode comes back on exit."""
    before = model.training
    model.train(training)
    try:
        yield
    finally:
        model.train(before)


def trainable_state(student: Student) -> dict[str, torch.Tensor]:
    """Returns {name: detached CPU copy} of the trainable tensors (the resume state's weights)."""
    return {name: p.detach().to("cpu", copy=True) for name, p in student.trainable.items()}


def load_trainable_state(student: Student, state: dict[str, torch.Tensor]) -> None:
    """Returns None after copying ``state`` into the trainable tensors; names must match exactly."""
    if set(state) != set(student.trainable):
        missing, extra = (
            sorted(set(student.trainable) - set(state)),
            sorted(set(state) - set(student.trainable)),
        )
        raise KeyError(f"resume state tensors differ from the model: missing {missing[:3]}, unexpected {extra[:3]}")
    with torch.no_grad():
        for name, param in student.trainable.items():
            param.copy_(state[name])


def export_model(student: Student) -> nn.Module:
    """Returns the model to save as the final checkpoint: LoRA merged into the base weights, or the model.

    Merging modifies the live model in place; call it once, after the last optimizer step.
    """
    model = student.model if student.peft is None else student.peft.merge_and_unload()
    return model.to(student.dtype)
