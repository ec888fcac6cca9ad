"""The vision tower's MLP on GEMM-aligned weights: a zero-padded intermediate width, the same outputs.

Qwen2.5-VL's vision MLP is 3,420 wide. A row of 3,420 bf16 values is not a multiple of 16 bytes, so cuBLAS
cannot give its three projections Hopper's TMA kernels and falls back to an SM80 kernel: on an H200, 32
images of 1,296 tokens spent 5.9 ms in each of them against 2.2 ms for the wider but aligned qkv projection
(``scripts/bench_train_step.py --profile``), 38% of the tower's time. Padding the intermediate width with
zero rows (gate and up weights and biases) and zero columns (down weight) to a multiple of
``model.vision_mlp_multiple`` changes no output: a padded channel meets a zero column of the down
projection. Gate and up then run as one matmul.

The padded weights are copies kept beside the module (not in its state dict, so checkpoints keep HF's
shapes), rebuilt when a source parameter's storage or version counter changes. With gradients enabled and a
trainable projection, the module's own forward runs, since a copy would cut the graph (tiny pretraining).
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class PaddedMLP:
    """One MLP's padded weights and the source-parameter key they were built from.

    Attributes:
        key: (storage pointer, version, dtype, device) of every source parameter.
        first: (2P, H) stacked gate and up weights (gated MLPs) or (P, H) fc1 weight, zero rows appended.
        first_bias: its bias, zero-padded the same way, or None.
        second: (H, P) down / fc2 weight, zero columns appended.
        second_bias: its bias (unpadded), or None.
        gated: whether the first output splits into act(gate) * up.
    """

    key: tuple
    first: torch.Tensor
    first_bias: torch.Tensor | None
    second: torch.Tensor
    second_bias: torch.Tensor | None
    gated: bool


_PADDED: weakref.WeakKeyDictionary[nn.Module, PaddedMLP] = weakref.WeakKeyDictionary()


def projections(mlp: nn.Module) -> tuple[list[nn.Linear], nn.Linear] | None:
    """Returns ([gate, up] or [fc1], down or fc2) of a Qwen vision MLP, or None for any other module."""
    if all(hasattr(mlp, name) for name in ("gate_proj", "up_proj", "down_proj")):
        return [mlp.gate_proj, mlp.up_proj], mlp.down_proj
    if all(hasattr(mlp, name) for name in ("linear_fc1", "linear_fc2", "act_fn")) and not hasattr(mlp, "norm"):
        return [mlp.linear_fc1], mlp.linear_fc2
    return None


def _source_key(firsts: list[nn.Linear], second: nn.Linear) -> tuple:
    """Returns what identifies the current values of the projections' parameters."""
    params = [p for layer in (*firsts, second) for p in layer.parameters(recurse=False)]
    return tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in params)


@torch.compiler.disable  # a host-side cache keyed by parameter versions: never traced
@torch.no_grad()
def padded_weights(mlp: nn.Module, multiple: int) -> PaddedMLP:
    """Returns ``mlp``'s padded weights, building them when absent or stale."""
    firsts, second = projections(mlp)
    key = _source_key(firsts, second)
    cached = _PADDED.get(mlp)
    if cached is not None and cached.key == key:
        return cached
    width = firsts[0].out_features
    padded = -(-width // multiple) * multiple
    first = torch.cat([F.pad(layer.weight, (0, 0, 0, padded - width)) for layer in firsts])
    first_bias = None
    if firsts[0].bias is not None:
        first_bias = torch.cat([F.pad(layer.bias, (0, padded - width)) for layer in firsts])
    built = PaddedMLP(key, first, first_bias, F.pad(second.weight, (0, padded - width)), second.bias, len(firsts) == 2)
    _PADDED[mlp] = built
    return built


def aligned_forward(mlp: nn.Module, multiple: int, hidden: torch.Tensor) -> torch.Tensor:
    """Returns ``mlp(hidden)`` computed on its padded weights (the module's own forward under training)."""
    if torch.is_grad_enabled() and any(p.requires_grad for p in mlp.parameters()):
        return type(mlp).forward(mlp, hidden)
    weights = padded_weights(mlp, multiple)
    out = F.linear(hidden, weights.first, weights.first_bias)
    if weights.gated:
        gate, up = out.chunk(2, dim=-1)
        out = mlp.act_fn(gate) * up
    else:
        out = mlp.act_fn(out)
    return F.linear(out, weights.second, weights.second_bias)


def align_vision_mlps(model: nn.Module, multiple: int) -> int:
    """Routes each vision-block MLP of ``model`` whose width is not a multiple of ``multiple`` through
    :func:`aligned_forward` and returns how many it routed; ``multiple`` 0 restores every module's own
    forward (a second call replaces the first's routing)."""
    routed = 0
    for name, module in model.named_modules():
        parts = projections(module) if name.endswith(".mlp") and ".visual." in f".{name}" else None
        if parts is None:
            continue
        vars(module).pop("forward", None)
        _PADDED.pop(module, None)
        if multiple == 0 or parts[0][0].out_features % multiple == 0:
            continue
        module.forward = functools.partial(aligned_forward, module, multiple)
        routed += 1
    return routed
