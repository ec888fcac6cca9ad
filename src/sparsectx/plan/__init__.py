"""The plan of a study before submission (``python -m sparsectx.plan experiment=<e>``; docs/plan.md).

Per job of the DAG: GPUs, per-GPU peak memory with its breakdown, planned wall time and the SLURM limit derived
from it; GPU-hours per block and for the study beside today's requests; jobs that cannot launch or fit refused.

- ``architecture``: exact parameter counts from the published config.json, built on the meta device;
- ``shapes``: what a job's memory and time depend on, read from its composed config;
- ``compose``: each job's config composed as its entry point composes it, cached per override list;
- ``memory``: the per-GPU peak model (checked against every measured peak: tests/plan);
- ``timing``: wall time from the throughput figures of docs/performance.md (conf/plan.yaml);
- ``jobs``: every job with its estimates and refusal; ``report``: the text; ``limits``: SLURM time limits;
- ``settings``: conf/plan.yaml and the GPU memory a Snakemake profile declares.
"""

from typing import Any

__all__ = ["planned_runtimes", "requested_runtime_minutes"]


def __getattr__(name: str) -> Any:
    """Returns ``limits``' exports on first use (PEP 562): importing one module of the package (``memory``, which
    evaluation's ``batch_size: auto`` rule reads) does not import the workflow and its schema checker with it."""
    if name in __all__:
        from sparsectx.plan import limits

        return getattr(limits, name)
    raise AttributeError(f"module 'sparsectx.plan' has no attribute {name!r}")
