"""``deterministic``: the same seed gives the same trained weights on CUDA.

Measured (docs/performance.md, "Run-to-run determinism of training"): two LT-OPD trainings of the tiny model
with the same seed on one H200, whose vision tower is trained, ended with different weights, because the
memory-efficient attention backward (the tower's block-diagonal attention) accumulates with atomics by
default; PyTorch reports it only once deterministic algorithms are requested. With
``torch.use_deterministic_algorithms(True)`` the same two runs wrote byte-identical checkpoints, about 20%
slower. LoRA runs with a frozen tower were already identical run to run.

Strict mode: an op without a deterministic CUDA kernel raises, naming itself, instead of silently varying.
The default is false (the plain kernels; the log says a rerun need not match): with true as the default, the
GPU tests of 8-bit optimizer states (torchao's AdamW8bit) failed on the device, not yet diagnosed.
``experiment=tiny_ltopd`` sets it true; its whole run under it wrote every table (docs/performance.md). cuBLAS needs
``CUBLAS_WORKSPACE_CONFIG`` set before its first call in the process; it is set here unless the caller set it.
"""

from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger(__name__)

CUBLAS_WORKSPACE = ":4096:8"
"""cuBLAS's workspace setting for reproducible results (NVIDIA's cuBLAS documentation, "Results
reproducibility"); PyTorch's strict mode requires it or ``:16:8`` on CUDA >= 10.2."""


def apply_determinism(deterministic: bool) -> None:
    """Turns PyTorch's deterministic algorithms on (strict) or off for this process, before any model is built."""
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    else:
        log.info("deterministic=false: CUDA kernels may accumulate in any order; a rerun need not match")
    torch.use_deterministic_algorithms(deterministic)
