"""The gradient sum of ``distributed.strategy=none`` on several processes: DDP's reducer, bucketed and overlapped
with backward.

What torch 2.13 offers, and why this one:

- ``DistributedDataParallel``: its C++ reducer groups the gradients into buckets (25 MiB; the first 1 MiB) and
  launches each bucket's all-reduce from autograd hooks as soon as every gradient in it is ready, so the sum of
  the gradients backward produced first runs while backward computes the rest.
- ``torch.distributed._composable.replicate``: that same DDP, built over a ``ParameterList`` of a module's
  parameters and driven by the module's forward hooks (``replicate.py``, ``_ReplicateState.init``,
  ``forward_pre_hook``, ``forward_post_hook``). The adapter never calls the root model's forward (it calls
  ``embed_tokens``, single decoder layers, ``norm`` and ``lm_head``; ``sparsectx.training.sharding``), and no
  module's forward holds every use of the trained tensors (the vision tower, the LM head), so there is no
  module to hook.
- ``replicate_with_fsdp.replicate`` and ``fully_shard`` on a replicate mesh: FSDP2's machinery, which makes
  every parameter of a unit a ``DTensor`` and all-gathers a copy of the unit before each forward (twice the
  weights in flight, and units the trainer's fsdp paths would take for shards: the clip over shards, DCP
  state, the gathered export).

So: DDP over a ``ParameterList`` of the trained tensors, exactly as composable ``replicate`` builds it, with
the two calls its forward hooks make (``DistributedDataParallel._pre_forward`` / ``_post_forward``) made around
each micro-batch's loss pass instead (``GradientSync.loss_pass``). Unlike a DDP forward, the pass does not run
with ``DistributedDataParallel._active_ddp_module`` set: TorchDynamo would then split each compiled frozen
block (teacher, probe) into bucket-sized graphs (``torch/_dynamo/convert_frame.py``, the ``ddp_optimizer``
branch; ``torch/_dynamo/backends/distributed.py``, ``DDPOptimizer.compile_fn`` counts every parameter that
requires grad, whatever the grad mode), a split that serves overlap in a backward those blocks never run.

Sums, not means: ``sum_buckets`` all-reduces each bucket with op SUM. DDP's default divides by the world size
(``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py``, ``_allreduce_fut``); a registered hook's
bucket is not predivided (``DistributedDataParallel.register_comm_hook``: "will not be predivided by
world_size"). So the synced gradient is exactly ∇L
(``sparsectx.training.update``'s contract), element for element the per-tensor all-reduce sum it replaced
(``tests/training/test_gradient_sync.py``).

Accumulation: every micro-batch but the step's last runs under ``no_sync`` (its gradients accumulate in
``.grad``); the last one's backward sums the accumulated gradients, once per optimizer step.

Buckets: DDP's defaults. Its first synced backward puts every gradient in one bucket; at the next pass DDP
rebuilds the buckets in the order the gradients arrived, as rank 0 saw it (``torch/nn/parallel/distributed.py``,
``_BucketCapacityConfig.compute_bucket_size_limits`` and ``_pre_forward``), so overlap starts at a run's second
step. The gradients are views into the buckets (``gradient_as_bucket_view``): no second copy of them, and the
bucket memory stays allocated between steps (the optimizer zeroes the views in place instead of freeing them).

Every trainable tensor must get a gradient in the step's last backward: DDP launches a bucket only when all its
tensors are ready (every item carries an image, so every micro-batch uses every trained tensor, the vision
tower included). ``GradientSync.check_synced`` refuses to update from a step where some were not summed.
"""

# No ``from __future__ import annotations``: DDP checks a comm hook's annotations as objects
# (``torch/nn/parallel/distributed.py``, ``DistributedDataParallel._check_comm_hook``).
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class GradientSync:
    """DDP's reducer over ``params``: sums their gradients over the processes inside each step's last backward.

    Build it on every process once the trainable tensors are final (after sharding and resume), and run each
    micro-batch's loss pass inside ``loss_pass`` and its backward right after.
    """

    def __init__(self, params: dict[str, nn.Parameter], bucket_cap_mb: float | None = None) -> None:
        """``bucket_cap_mb``: DDP's bucket size (None: DDP's own default, 25 MiB)."""
        self.names = {id(param): name for name, param in params.items()}
        self.synced: set[int] = set()
        # init_sync=False: every process loads the same weights and seeds the same initialisation (the per-tensor
        # sum relied on that too), so DDP's broadcast of every parameter at construction is skipped
        self.ddp = DistributedDataParallel(
            nn.ParameterList(params.values()),
            init_sync=False,
            bucket_cap_mb=bucket_cap_mb,
            gradient_as_bucket_view=True,
        )
        self.ddp.register_comm_hook(self, sum_buckets)

    @contextmanager
    def loss_pass(self, synced: bool) -> Iterator[None]:
        """Returns the context a micro-batch's loss pass (its forwards with gradients) runs in; the backward of
        a ``synced`` pass sums the gradients accumulated so far, any other's only accumulates them."""
        with nullcontext() if synced else self.ddp.no_sync():
            self.ddp._pre_forward()
            yield
            self.ddp._post_forward(None)

    def check_synced(self) -> None:
        """Returns None once every trainable tensor's gradient was summed in this step's last backward (and
        starts counting the next step's); raises RuntimeError naming those that were not."""
        missing = sorted(name for key, name in self.names.items() if key not in self.synced)
        self.synced.clear()
        if missing:
            raise RuntimeError(
                f"DDP did not sum the gradients of {len(missing)} trainable tensors in the step's last backward "
                f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}): a tensor without a gradient "
                "there holds back its whole bucket, and the update would take unsummed gradients. Under "
                "distributed.strategy=none on several processes every micro-batch must use every trained tensor"
            )


def sum_buckets(sync: GradientSync, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Returns the future of ``bucket``'s all-reduce with op SUM (DDP's comm hook; no division by the number of
    processes), after noting its tensors as summed."""
    sync.synced.update(id(param) for param in bucket.parameters())
    work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.SUM, async_op=True)
    return work.get_future().then(lambda done: done.value()[0])
