"""Per-GPU peak memory of a job, from the architecture's exact sizes and the code's own precision choices.

What each term rests on (docs/plan.md has the table against every measured peak):

- Weights: bf16 (``model.dtype``); trained tensors are fp32 master weights (``training.student``: LoRA adapters,
  or the whole language model, and the tower under ``method.train_vision``), their gradients fp32, AdamW's two
  moments 8 bytes per trained parameter or 2 under ``memory.optimizer_states=int8`` (``update.build_optimizer``).
  An EMA or progressive teacher keeps an fp32 copy of the trained tensors; a full-parameter run with a frozen or
  trust-region teacher a bf16 copy of the whole model (``memory.teacher_offload``: on the GPU only in the teacher
  phase, whole). The rollout twin (``decode_copy``) holds the adapted weights in bf16 (the whole language model
  under fsdp, built before sharding). FSDP divides the language model's weights, gradients and states by the
  processes (the tower stays replicated) and gathers the whole language model in bf16 for the rollout phase.
- Activations saved for backward, per token per decoder layer, counted from the ops of an HF layer under bf16
  autocast: RMSNorm keeps its fp32 input (and its bf16 output when its weight trains), the projections' shared
  input, sdpa's q, k, v, output and log-sum-exp, the output projection's input, and the gated MLP's gate, up,
  activation and product. Qwen3.5's linear-attention layers (torch fallback of the gated delta rule) are counted
  as their mixer width in bf16 three times plus fp32 twice (an approximation). With activation checkpointing each
  layer keeps its bf16 input and one layer's activations live again in backward.
- Logits: only response positions are projected (``response_logits``), bf16; the divergences gather the masked
  rows (one more copy) and run fp32 chunk by chunk under checkpointing, so no fp32 (B, T, V) exists, except SFT's
  cross-entropy (``token_cross_entropy``: an fp32 copy and its log-softmax).
- The decode engine's slot cache stays allocated with its captured graph: slots rounded up to a bucket, length
  to ``engine.length_step``; Qwen3.5's linear-attention layers hold a fixed state per slot instead of keys. An
  evaluation process keeps ``engine.graph_cache`` captured shapes, each with its cache, and the encoded images of
  its engine call's queue (``evaluation_call_terms``).
- ``allocator_overhead_gb`` (conf/plan.yaml), one global constant: cuBLAS workspaces and CUDA-graph pools.

Peak = what stays allocated the whole step + the largest of its phases (rollouts, teacher, student loss and
backward), as ``torch.cuda.max_memory_allocated`` measures it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparsectx.plan.architecture import Architecture
from sparsectx.plan.shapes import EvalShape, TrainShape

GB = 1e9
BF16, FP32 = 2, 4


@dataclass(frozen=True)
class EngineSizes:
    """The decode engine's rounding (``conf/engine/default.yaml``): slot buckets and cache length step."""

    slot_buckets: tuple[int, ...]
    length_step: int

    def slots(self, wanted: int) -> int:
        """Returns the bucket ``wanted`` slots are rounded up to."""
        return next((b for b in self.slot_buckets if b >= wanted), wanted)

    def length(self, tokens: int) -> int:
        """Returns ``tokens`` rounded up to the cache length step."""
        return -(-tokens // self.length_step) * self.length_step


@dataclass
class Estimate:
    """A per-GPU peak: the resident terms, the phase that peaks and its terms, in GB."""

    resident: dict[str, float]
    phases: dict[str, dict[str, float]]
    overhead: float
    peak_phase: str = field(init=False)

    def __post_init__(self) -> None:
        self.peak_phase = max(self.phases, key=lambda p: _total(self.phases[p]))

    @property
    def peak_gb(self) -> float:
        """Returns the estimated peak allocation in GB."""
        return _total(self.resident) + _total(self.phases[self.peak_phase]) + self.overhead

    def breakdown(self) -> dict[str, float]:
        """Returns every term of the peak (resident, then the peaking phase's), in GB, zeros dropped."""
        terms = {**self.resident, **{f"{self.peak_phase}: {k}": v for k, v in self.phases[self.peak_phase].items()}}
        terms["allocator overhead"] = self.overhead
        return {k: round(v, 2) for k, v in terms.items() if v > 0.005}


TRAINED_WEIGHTS, OPTIMIZER_STATES = "weights (fp32 trained)", "optimizer states"
EMA_TEACHER = "EMA/progressive teacher (fp32)"


def resume_state_gb(estimate: Estimate) -> float:
    """Returns the GB one training process writes to its resume state (``state/``): its trained fp32 tensors,
    their optimizer moments and an EMA or progressive teacher; the frozen bf16 weights are reloaded, not saved."""
    return sum(estimate.resident.get(term, 0.0) for term in (TRAINED_WEIGHTS, OPTIMIZER_STATES, EMA_TEACHER))


def layer_bytes(arch: Architecture, full_parameter: bool) -> float:
    """Returns the bytes one token saves for backward in one decoder layer (the mean over its layer kinds)."""
    h, inter = arch.hidden, arch.intermediate
    q, kv = arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim
    norm = arch.norms_per_layer * (FP32 + (BF16 if full_parameter else 0)) * h
    mlp = BF16 * h + 4 * BF16 * inter
    attention = BF16 * (h + 2 * q + 2 * kv + q) + FP32 * arch.heads
    attention += BF16 * 2 * (arch.q_width - q)  # an output gate: its sigmoid and product
    if arch.qk_norm:
        attention += (FP32 + (BF16 if full_parameter else 0)) * (q + kv)
    linear = 3 * BF16 * arch.linear_width + 2 * FP32 * arch.linear_width
    kinds = arch.attention_layers * attention + (arch.layers - arch.attention_layers) * linear
    return norm + mlp + kinds / arch.layers


def layer_working_bytes(arch: Architecture) -> float:
    """Returns the bytes one token occupies while one layer runs without gradients (its widest moment)."""
    return BF16 * (3 * arch.hidden + arch.q_width + 2 * arch.kv_heads * arch.head_dim + 3 * arch.intermediate) + (
        FP32 * arch.hidden
    )


def vision_patch_bytes(arch: Architecture, grad: bool) -> float:
    """Returns the bytes one patch holds in the vision tower: saved for backward over every block (``grad``),
    or one block's working set (no gradients)."""
    per_block = BF16 * arch.vision_block_width + 2 * FP32 * arch.vision_width
    return per_block * arch.vision_blocks if grad else per_block + BF16 * arch.vision_width


def cache_bytes(arch: Architecture, engine: EngineSizes, sequences: int, tokens: int) -> float:
    """Returns the engine's slot cache for ``sequences`` of up to ``tokens`` positions."""
    slots = engine.slots(sequences)
    return slots * (engine.length(tokens) * arch.kv_bytes_per_token() + arch.linear_state_bytes)


def training_estimate(arch: Architecture, s: TrainShape, engine: EngineSizes, overhead: float) -> Estimate:
    """Returns the per-GPU peak of one process of a training job of shape ``s`` on ``arch``."""
    shard = s.processes if s.fsdp else 1
    lm, vis = arch.language, arch.vision
    full = s.lora_rank is None
    trained_lm = lm if full else arch.lora(s.lora_rank, list(s.lora_targets))
    trained_vis = vis if full and s.train_vision else 0
    trained = trained_lm / shard + trained_vis  # per process
    frozen = (0 if full else lm / shard) + (vis - trained_vis)
    resident = {
        "weights (bf16 frozen)": BF16 * frozen / GB,
        "weights (fp32 trained)": FP32 * trained / GB,
        OPTIMIZER_STATES: (2 if s.int8_states else 8) * trained / GB,
    }
    if s.teacher in ("ema", "progressive"):
        resident[EMA_TEACHER] = FP32 * trained / GB
    frozen_copy = full and s.teacher in ("frozen", "trust_region")
    if frozen_copy and not s.teacher_offload:
        resident["frozen teacher copy (bf16)"] = BF16 * (lm / shard + vis) / GB
    if s.twin:
        own = lm if s.fsdp else (trained_lm + trained_vis if full else arch.adapted(list(s.lora_targets)))
        resident["rollout twin (bf16)"] = BF16 * own / GB
    response = s.new_tokens
    if s.rollouts:
        resident["decode slot cache"] = cache_bytes(arch, engine, s.step_sequences, s.student_tokens + response) / GB
    features = s.images * s.visual_tokens * arch.hidden * BF16 * max(1, s.step_sequences // max(1, s.micro_sequences))
    resident["encoded visual features"] = features / GB

    gathered = 0.0
    if s.fsdp:
        gathered = BF16 * lm if full else BF16 * lm * (1 - 1 / shard)
    patches = s.images * s.visual_tokens * arch.patches_per_token
    encode = patches * vision_patch_bytes(arch, grad=False)
    rollout = {"fsdp gathered language model (bf16)": gathered / GB, "vision encode": encode / GB}
    if s.rollouts:
        tokens = s.step_sequences * s.student_tokens
        rollout["rollout prefill"] = tokens * layer_working_bytes(arch) / GB

    seq = s.micro_sequences
    logits = seq * response * arch.vocab * BF16
    teacher_tokens = seq * (s.teacher_tokens + response)
    teacher: dict[str, float] = {}
    if s.teacher != "none":
        teacher = {
            "fsdp gathered language model (bf16)": gathered / GB,
            "teacher forward": teacher_tokens * layer_working_bytes(arch) / GB,
            "teacher logits": logits / GB,
        }
        if frozen_copy and s.teacher_offload:
            teacher["offloaded teacher copy on the GPU"] = BF16 * arch.total / GB
        if s.teacher == "ema" and full and not s.twin:
            teacher["EMA swap backup (fp32)"] = FP32 * trained / GB

    student_tokens = seq * (s.student_tokens + response)
    per_layer = layer_bytes(arch, full)
    if s.checkpointing:
        saved = student_tokens * (BF16 * arch.hidden * arch.layers + per_layer)
    else:
        saved = student_tokens * per_layer * arch.layers
    loss = {
        "gradients (fp32)": FP32 * trained / GB,
        "student activations": saved / GB,
        "student logits + masked copy": 2 * logits / GB,
    }
    if full and not s.fsdp:  # autocast keeps a bf16 cast of every fp32 weight for the forward and backward
        loss["autocast weight casts (bf16)"] = BF16 * (trained_lm + trained_vis) / GB
    if s.train_vision:  # the loss forward recomputes the tower with gradients (``vision_training``)
        kept = BF16 * arch.vision_width * arch.vision_blocks + vision_patch_bytes(arch, grad=False)
        per_patch = kept if s.checkpointing else vision_patch_bytes(arch, grad=True)
        loss["vision tower activations"] = patches * per_patch / GB
    if s.teacher != "none":
        loss["teacher logits + masked copy"] = 2 * logits / GB
    if s.objective in ("sft", "distill_sft"):
        loss["cross-entropy fp32 copy and log-softmax"] = 2 * FP32 * seq * response * arch.vocab / GB
    transient = {"backward: logits gradients": 2 * logits / GB}
    if s.probe_tokens is not None:
        probe = seq * (s.probe_tokens + response) * layer_working_bytes(arch)
        transient = max(transient, {"b+δ probe logits and forward": (logits + probe) / GB}, key=_total)
    loss.update(transient)
    phases = {"rollout": rollout, "loss": loss}
    if teacher:
        phases["teacher"] = teacher
    return Estimate(resident, phases, overhead)


def encode_estimate(arch: Architecture, images: int, visual_tokens: int, overhead: float) -> Estimate:
    """Returns the peak of encoding ``images`` images of ``visual_tokens`` merged tokens without gradients: the
    tower's bf16 weights, the fp32 pixel values and their bf16 cast, one block's working set over every patch,
    and the merged features."""
    patches = images * visual_tokens * arch.patches_per_token
    pixels = patches * arch.pixels_per_patch * (FP32 + BF16)
    phase = {
        "pixel values (fp32 + bf16)": pixels / GB,
        "vision block working set": patches * vision_patch_bytes(arch, grad=False) / GB,
        "merged features": images * visual_tokens * arch.hidden * BF16 / GB,
    }
    return Estimate({"vision weights (bf16)": BF16 * arch.vision / GB}, {"vision encode": phase}, overhead)


def _total(terms: dict[str, float]) -> float:
    return sum(terms.values())


def evaluation_estimate(arch: Architecture, s: EvalShape, engine: EngineSizes, overhead: float) -> Estimate:
    """Returns the per-GPU peak of an evaluation process: bf16 weights, then one engine call
    (``evaluation_call_terms``). The plan's estimate and evaluation's ``batch_size: auto`` rule
    (``sparsectx.eval.slots_budget``) both read it: one memory formula."""
    resident, phases = evaluation_call_terms(arch, s, engine)
    return Estimate({"weights (bf16)": BF16 * arch.total / GB, **resident}, phases, overhead)


def evaluation_call_terms(
    arch: Architecture, s: EvalShape, engine: EngineSizes
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Returns what one evaluation engine call holds beside the weights, in GB: (resident terms, phases).

    Resident: the slot caches of ``s.cached_shapes`` (slots, length) shapes, each ``cache_positions`` long (prompt
    + cap + 1, ``sparsectx.engine.decode.cache_positions``; a captured graph keeps its cache,
    ``DecodeEngine.step_for``), and the encoded visual features of the call's ``s.queued`` items (the whole call
    is encoded before it decodes, ``sparsectx.eval.protocol.generate_decoded``). Phases: the prefill of the
    slots' prompts, at most ``s.prefill_tokens`` padded tokens per forward (one prompt if longer,
    ``sparsectx.engine.decode.prefill_groups``), its working set and its full-width cache; ``s.slots`` items'
    images through the tower (``encode_in_batches``); and the fp32 next-token logits.
    """
    cache = cache_bytes(arch, engine, s.slots, s.prompt_tokens + s.new_tokens + 1)
    resident = {
        "decode slot cache": s.cached_shapes * cache / GB,
        "queued items' visual features": s.queued * s.visual_tokens * arch.hidden * BF16 / GB,
    }
    prefilled = min(s.slots * s.prompt_tokens, max(s.prefill_tokens, s.prompt_tokens))
    patches = s.slots * s.visual_tokens * arch.patches_per_token
    phases = {
        "prefill": {
            "prefill": prefilled * layer_working_bytes(arch) / GB,
            "prefill cache": prefilled * arch.kv_bytes_per_token() / GB,
        },
        "vision": {"vision encode": patches * vision_patch_bytes(arch, grad=False) / GB},
        "decode": {"next-token logits (fp32)": engine.slots(s.slots) * arch.vocab * FP32 / GB},
    }
    return resident, phases
