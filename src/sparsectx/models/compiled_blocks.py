"""Vision blocks and decoder layers through ``torch.compile`` in forwards that train none of their weights.

A 7B step's frozen passes (the vision tower, the teacher's full-context forward on the rollout twin, the
probe) spend a quarter to two thirds of their GPU time in elementwise kernels that HF runs one by one:
fp32 RMSNorm (six kernels each), the fp32 rotary of queries and keys, bias and residual adds, the gated
activation (``scripts/bench_train_step.py --profile``). Inductor fuses each such chain into one kernel.
``model.compile_blocks`` routes every vision block and decoder layer of a model through one compiled
function per kind (the blocks of a kind share its compiled code, since parameters are graph inputs).

A module runs its own eager forward whenever compiling would not pay or not be safe: when gradients are on
and one of its parameters trains (LoRA layers, full-parameter training, the tiny pretraining), and when a
KV cache is passed (prefill into a ``DynamicCache``; the decode engine compiles its whole step itself,
``engine.compile``). The outputs are the module's own up to the rounding of fused reductions (tested at
1e-5 in fp32). The grouped vision attention and the padded MLP's weight cache stay outside the compiled
graphs (``torch.compiler.disable``): both keep host-side caches that must not be traced.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn

from sparsectx.checks import check_choice

COMPILE_BLOCKS = ("auto", "on", "off")


def _vision_block(module: nn.Module, *args: object, **kwargs: object) -> torch.Tensor:
    return type(module).forward(module, *args, **kwargs)


def _decoder_layer(module: nn.Module, *args: object, **kwargs: object) -> torch.Tensor:
    return type(module).forward(module, *args, **kwargs)


# Two functions, two code objects: each kind keeps its own compiled entries (dynamo caches per code object).
_FORWARDS = {"vision": _vision_block, "decoder": _decoder_layer}


@functools.cache
def compiled(kind: str) -> Callable[..., torch.Tensor]:
    """Returns the compiled forward of ``kind`` (``vision`` or ``decoder``), made on first use: ``torch.compile``
    imports inductor (~0.5 s), which a process that never compiles should not pay."""
    return torch.compile(_FORWARDS[kind])


def trains_here(module: nn.Module) -> bool:
    """Returns whether a forward of ``module`` now would train one of its parameters."""
    return torch.is_grad_enabled() and any(p.requires_grad for p in module.parameters())


def compiled_forward(kind: str, module: nn.Module, *args: object, **kwargs: object) -> torch.Tensor:
    """Returns ``module``'s forward on the arguments: compiled for a frozen, cache-free call, else eager."""
    if trains_here(module) or kwargs.get("past_key_values") is not None:
        return type(module).forward(module, *args, **kwargs)
    return compiled(kind)(module, *args, **kwargs)


def block_lists(model: nn.Module) -> dict[str, nn.ModuleList]:
    """Returns the vision blocks (packed towers at ``model.model.visual`` only: not LLaVA-OneVision's SigLIP)
    and the decoder layers of a ``...ForConditionalGeneration`` model."""
    inner = model.model
    visual = getattr(inner, "visual", None)
    vision = {} if visual is None else {"vision": visual.blocks}
    return {**vision, "decoder": inner.language_model.layers}


def compile_on(choice: str, device: torch.device) -> bool:
    """Returns whether ``model.compile_blocks=choice`` compiles on ``device`` (``auto``: on CUDA only).

    On a CPU the compile time (a C++ build per kernel) outweighs what fusion saves at the tiny sizes.
    """
    check_choice(choice, COMPILE_BLOCKS, "model.compile_blocks")
    return choice == "on" or (choice == "auto" and device.type == "cuda")


def compile_blocks(model: nn.Module, on: bool) -> int:
    """Routes ``model``'s vision blocks and decoder layers through :func:`compiled_forward` (``on``) or back
    to their own forwards; returns how many modules are routed."""
    routed = 0
    for kind, blocks in block_lists(model).items():
        for block in blocks:
            vars(block).pop("forward", None)
            if on:
                block.forward = functools.partial(compiled_forward, kind, block)
                routed += 1
    return routed
