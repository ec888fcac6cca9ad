"""The rollout weights: decode with the live student, or with a plain copy of its current weights.

A LoRA student decodes through peft's adapter layers: every adapted linear adds a down- and an
up-projection, a scale and an add per token step, about 1,200 small kernels per step at 7B, which made a
captured decode step 75% slower than the same model without adapters. A full-parameter student keeps fp32
master weights, so every decode step under autocast first casts the whole language model to bf16. The
``copy`` choice (``rollout_weights``) instead decodes with a twin of the model whose adapted (or trained)
weights are its own tensors in the checkpoint dtype, refreshed in place before every rollout call:
W + scaling·B·A for LoRA (peft's ``get_delta_weight``, summed in fp32 and rounded once), a cast of the
fp32 master weight for full-parameter training (the vision tower's too under ``method.train_vision``).
Every other tensor (the vision tower when it is not trained, embeddings, norms, the LM head when it is not
trained) is the student's own, shared, so the twin costs the adapted weights once
(13 GB at 7B with LoRA on every projection). Storage never moves, so the engine's captured graphs stay valid.

The twin's logits equal the live student's up to the rounding of the merged weight (the same mismatch
vLLM-backed RL trainers accept); ``live`` decodes with the student itself, exactly.

Under ``distributed.strategy=fsdp`` the twin is built before the student is sharded (``shard_keeping_twin``),
so it keeps the whole frozen model (every process holds one copy: ``rollout_weights=copy`` trades that memory
for rollouts without adapter layers and without FSDP's per-unit hooks in the decode loop). It is refreshed
where every unit is gathered, the rollout phase or a teacher's own gathered pass (``teacher_twin``): the
sources are looked up on their modules then, so the refresh reads the gathered tensors. ``auto`` stays
``live`` under fsdp.
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass

import torch
from peft.tuners.lora import LoraLayer
from torch import nn

from sparsectx.checks import check_choice
from sparsectx.models import adapter_for
from sparsectx.models.adapter import VLMAdapter
from sparsectx.training.config import ROLLOUT_WEIGHTS
from sparsectx.training.sharding import gathered, is_sharded, shard_student
from sparsectx.training.student import Student


@dataclass
class DecodeCopy:
    """A twin of the student's model for rollouts and the (twin tensor, source) pairs refreshed into it."""

    adapter: VLMAdapter
    merged: list[tuple[torch.Tensor, LoraLayer]]
    """LoRA targets: the twin's weight and the student's adapter layer it merges."""
    cast: list[tuple[torch.Tensor, nn.Module, str]]
    """Full-parameter: the twin's weight and where the student's fp32 master weight is registered (module,
    attribute), looked up at each refresh (fsdp registers the gathered tensor there while gathered)."""

    @torch.no_grad()
    def refresh(self) -> None:
        """Returns None after writing the student's current weights into the twin (in place)."""
        for target, layer in self.merged:
            adapter = layer.active_adapters[0]
            merged = layer.base_layer.weight.float() + layer.get_delta_weight(adapter).float()
            target.copy_(merged)
        for target, module, name in self.cast:
            target.copy_(getattr(module, name))


def uses_copy(choice: str, student: Student) -> bool:
    """Returns whether ``rollout_weights=choice`` decodes with the twin for this student."""
    check_choice(choice, ROLLOUT_WEIGHTS, "rollout_weights")
    if choice == "auto":  # never under fsdp: there the twin keeps a whole frozen model on every process
        return student.peft is not None and student.model.device.type == "cuda" and not is_sharded(student)
    return choice == "copy"


def build_copy(student: Student, signal_chunk: int) -> DecodeCopy:
    """Returns the twin of ``student``'s model: shared frozen tensors, own tensors for what trains."""
    model = student.model
    dtype = student.dtype
    trainable = {id(p) for p in student.trainable.values()}
    memo: dict[int, object] = {}
    cast = []
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if id(param) in memo:  # a tied weight: refreshed once, through its first holder
                continue
            if student.peft is None and id(param) in trainable:
                twin = nn.Parameter(torch.empty_like(param, dtype=dtype), requires_grad=False)
                cast.append((twin, module, name))
                memo[id(param)] = twin
            else:
                memo[id(param)] = param
    for buffer in model.buffers():
        memo[id(buffer)] = buffer
    twin_model = copy.deepcopy(model, memo).eval()
    merged = []
    for name, layer in list(twin_model.named_modules()):
        if isinstance(layer, LoraLayer):
            source = model.get_submodule(name)
            linear = plain_linear(source)
            twin_model.set_submodule(name, linear)
            merged.append((linear.weight, source))
    twin_model.requires_grad_(False)
    return DecodeCopy(adapter_for(twin_model, signal_chunk), merged, cast)


def plain_linear(layer: LoraLayer) -> nn.Linear:
    """Returns an ``nn.Linear`` with its own weight shaped as ``layer``'s base weight, the bias shared."""
    base = layer.base_layer
    linear = nn.Linear(base.in_features, base.out_features, bias=False, device="meta")
    linear.weight = nn.Parameter(torch.empty_like(base.weight), requires_grad=False)
    linear.bias = base.bias
    return linear


_COPIES: weakref.WeakKeyDictionary[nn.Module, DecodeCopy] = weakref.WeakKeyDictionary()


def rollout_adapter(student: Student, choice: str, signal_chunk: int) -> VLMAdapter:
    """Returns the adapter rollouts decode with: the student's, or its twin refreshed to the current weights.

    The twin is built on first use and kept with the model, so its captured decode graphs are reused.
    """
    if not uses_copy(choice, student):
        return student.adapter
    if student.model not in _COPIES and is_sharded(student):
        raise RuntimeError(
            "rollout_weights=copy under fsdp: the twin is built before sharding "
            "(shard_keeping_twin), and this student was sharded without it"
        )
    twin = kept_copy(student, signal_chunk)
    twin.refresh()
    return twin.adapter


def kept_copy(student: Student, signal_chunk: int) -> DecodeCopy:
    """Returns the twin kept with ``student``'s model, built on first use (``build_copy``)."""
    if student.model not in _COPIES:
        _COPIES[student.model] = build_copy(student, signal_chunk)
    return _COPIES[student.model]


def teacher_twin(student: Student, signal_chunk: int) -> VLMAdapter:
    """Returns the twin refreshed to the model's current tensors for a teacher forward (``teacher_weights=copy``).

    It runs inside the teacher's view (an EMA swapped in, or the student itself), outside the step's gathered
    rollout phase: under fsdp the refresh gathers every unit once (the swapped-in shards included) and
    reshards them after, so it reads whole tensors; the twin's forward then runs without FSDP's hooks.
    """
    with gathered(student.model):
        return rollout_adapter(student, "copy", signal_chunk)


def shard_keeping_twin(
    student: Student, rollout_weights: str, teacher_weights: str, signal_chunk: int, device: torch.device
) -> None:
    """Returns None after sharding the student (``sharding.shard_student``); when ``rollout_weights`` or
    ``teacher_weights`` is ``copy`` the twin is built first, from the whole model, and kept with it."""
    if "copy" in (rollout_weights, teacher_weights):
        kept_copy(student, signal_chunk)
    shard_student(student, device)
