"""FSDP2 for ``distributed.strategy=fsdp``: the language model's parameters, gradients and AdamW states sharded.

Why torch's ``fully_shard`` and not Accelerate's FSDP plugin: the adapter calls the language model's parts
directly (``embed_tokens``, the text model, ``norm``, ``lm_head``; in-LLM pruning calls single decoder layers),
never the root model's forward, so the root unit ``accelerator.prepare`` builds would never gather its
parameters; and Accelerate ignores the plugin on CPU (``Accelerator(cpu=True)`` runs MULTI_CPU without FSDP),
where the equivalence tests run (gloo). Accelerate still provides the process group and the device.

Units (``shard_model``): every decoder layer, every other direct child of the text model holding parameters
(``embed_tokens``, ``norm``) and ``lm_head``. Each is a module the adapter calls, so its forward hooks gather
it, and each is its own FSDP root (no unit wraps the whole model). The vision tower stays replicated: the
grouped attention and the GEMM-aligned MLP read its weights directly, and it is small (0.7B at 7B); when it
trains (``method.train_vision``) its gradients are summed after backward, one all-reduce per tensor
(``sum_replicated_gradients``; under ``none`` DDP's buckets sum them, ``sparsectx.training.replication``).
Tied embeddings (``embed_tokens`` and ``lm_head`` sharing one weight, as in the 3B models and the tiny model)
stay replicated too: a unit of two modules must sit below a root unit, which this layout has none of.

Gradients: every unit reduce-scatters its gradient after each micro-batch's backward with divide factor 1, a
SUM over processes, so the synced gradient is exactly ∇L (``sparsectx.training.update``'s contract). Every
process must therefore run the same backwards: a non-finite loss is agreed on before any backward.

Rollouts (and the step's other no-grad context passes) run inside ``gathered``: a decode loop takes a
different number of steps on each process (each stops with its own rollouts), which per-layer all-gathers
would turn into a deadlock, so every unit is gathered once for the phase and resharded after. That phase
holds the whole model once, in the compute dtype.

One process: ``python src/train.py distributed.strategy=fsdp`` without a launcher has no process group, so
``process_group`` makes a one-rank group for the run (nothing is split; the same code path runs, which is how
the sharded step's cost is measured on one GPU against the replicated one).

Precision: with a half-precision checkpoint every unit gathers in that dtype and reduces gradients in fp32
(``MixedPrecisionPolicy``); the sharded trained tensors are the fp32 master weights and AdamW's states are
fp32. With an fp32 checkpoint nothing is cast.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from sparsectx.training.ema import PeriodicCopy
from sparsectx.training.lora import trainable_named
from sparsectx.training.student import Student

CLIP_EPS = 1e-6
"""``torch.nn.utils.clip_grad_norm_``'s ε in max_norm / (norm + ε), kept so both strategies clip alike."""


@contextmanager
def process_group(strategy: str, device: torch.device) -> Iterator[None]:
    """Returns a context in which ``fsdp`` has a process group: a run started without a launcher gets a
    one-rank group (NCCL on CUDA, gloo on the CPU), destroyed on exit; a launched run keeps its own."""
    if strategy != "fsdp" or dist.is_initialized():
        yield
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def shard_units(model: nn.Module, language_model: nn.Module) -> list[nn.Module]:
    """Returns the modules to shard, one FSDP unit each: decoder layers, the text model's other parameter
    holders, ``lm_head``. Modules that share a parameter (tied embeddings) stay replicated, like the vision
    tower: FSDP2 accepts a unit of several modules only below a root unit, and here every unit is called
    directly and so is its own root."""
    children = [m for name, m in language_model.named_children() if name != "layers"]
    modules = [*language_model.layers, *(m for m in children if any(True for _ in m.parameters())), model.lm_head]
    holders = Counter(id(p) for module in modules for p in module.parameters())
    return [module for module in modules if all(holders[id(p)] == 1 for p in module.parameters())]


def shard_model(model: nn.Module, language_model: nn.Module, mesh: DeviceMesh, dtype: torch.dtype) -> None:
    """Returns None after sharding ``model``'s language model with FSDP2 (``shard_units``), gradients summed."""
    policy = MixedPrecisionPolicy()
    if dtype != torch.float32:
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for unit in shard_units(model, language_model):
        fully_shard(unit, mesh=mesh, mp_policy=policy)
    for unit in fsdp_units(model):  # a plain SUM over processes (the step's ∇L, never a mean); gloo has no
        unit.set_gradient_divide_factor(1.0)  # PREMUL_SUM, and a sum needs no scaling
        unit.set_force_sum_reduction_for_comms(True)


def fsdp_units(model: nn.Module) -> list[FSDPModule]:
    """Returns ``model``'s FSDP units (empty for a plain model)."""
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def is_sharded(student: Student) -> bool:
    """Returns whether the student's model is sharded (``distributed.strategy=fsdp``)."""
    return bool(fsdp_units(student.model))


def shard_student(student: Student, device: torch.device) -> None:
    """Returns None after sharding the student and its frozen copy over every process.

    ``fully_shard`` replaces each parameter by a sharded one, so the trainable tensors are looked up again and
    a progressive teacher's copy θ_0 is re-taken from them (same values, sharded alike); an EMA's shadow is
    made from the sharded tensors at its first update. Call before building the optimizer.
    """
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    shard_model(student.model, student.adapter.language_model, mesh, student.dtype)
    if student.frozen is not None:
        shard_model(student.frozen.model, student.frozen.language_model, mesh, student.dtype)
    student.trainable = trainable_named(student.model)
    if isinstance(student.ema, PeriodicCopy):  # θ_0 again, sharded like θ
        student.ema = PeriodicCopy(student.ema.interval, student.trainable)


_GATHERED: set[int] = set()
"""``id``s of the models inside a ``gathered`` context (an inner context leaves them gathered)."""


@contextmanager
def gathered(model: nn.Module) -> Iterator[None]:
    """Returns a context in which every FSDP unit of ``model`` is whole (gathered once, no collective inside
    any forward); the units are sharded again on exit. A plain model is left alone, and so is one already
    gathered by an enclosing context (which reshards it at its own exit)."""
    units = fsdp_units(model)
    if not units or id(model) in _GATHERED:
        yield
        return
    _GATHERED.add(id(model))
    for unit in units:
        unit.unshard()
        unit.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        _GATHERED.discard(id(model))
        for unit in units:
            unit.set_reshard_after_forward(True, recurse=False)
            unit.reshard()


def sum_replicated_gradients(params: list[nn.Parameter]) -> None:
    """Returns None after summing over processes the gradients of the replicated (not sharded) parameters;
    the sharded ones were reduce-scattered (summed) in backward already."""
    for param in params:
        if isinstance(param, DTensor):
            continue
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)


def clip_gradients(params: list[nn.Parameter], max_norm: float) -> float:
    """Returns the global L2 norm of the gradients (sharded and replicated) after scaling them to at most
    ``max_norm``, as ``torch.nn.utils.clip_grad_norm_`` does on whole tensors."""
    grads = [p.grad for p in params if p.grad is not None]
    sharded = [g.to_local() for g in grads if isinstance(g, DTensor)]  # views of the shards' storage
    replicated = [g for g in grads if not isinstance(g, DTensor)]
    device = grads[0].device if grads else torch.device("cpu")
    squares = sum_of_squares(sharded, device)
    dist.all_reduce(squares, op=dist.ReduceOp.SUM)
    squares += sum_of_squares(replicated, device)  # the same on every process: added once, after the sum
    norm = math.sqrt(float(squares))
    scale = min(1.0, max_norm / (norm + CLIP_EPS))
    if math.isfinite(norm) and grads:  # plain tensors: one multi-tensor kernel, no DTensor dispatch per grad
        torch._foreach_mul_([*sharded, *replicated], scale)
    return norm


def sum_of_squares(tensors: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """Returns the sum of squares of ``tensors``' elements (a 0-d fp64 tensor on ``device``), formed as
    ``clip_grad_norm_`` forms its norm: per-tensor norms in the gradients' dtype by one multi-tensor kernel,
    then combined (here in fp64, so the sum over processes adds no rounding of its own)."""
    if not tensors:
        return torch.zeros((), dtype=torch.float64, device=device)
    return torch.stack(torch._foreach_norm(tensors)).double().pow(2).sum()
