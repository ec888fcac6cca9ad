"""Training-step cost: the project's SCOPD, SCOPD+ and LT-OPD steps against a plain-HF reference.

    python scripts/bench_train_step.py                                  # CUDA, bf16, random Qwen2.5-VL-7B
    python scripts/bench_train_step.py --arch qwen3_vl_4b
    python scripts/bench_train_step.py --methods lt_opd --override memory.activation_checkpointing=true
    python scripts/bench_train_step.py --tiny                           # CPU smoke run on the tiny model
    python scripts/bench_train_step.py --methods scopd_plus --no-reference --override distributed.strategy=fsdp
    accelerate launch --num_processes 4 scripts/bench_train_step.py --methods scopd_plus --no-reference \
        --override distributed.strategy=fsdp

The model is the real architecture with random weights (``bench_common``), images are resized to 1296
merged visual tokens, the budget is the preset's (10% for SCOPD/SCOPD+, LT-OPD's curriculum starts higher),
rollouts run ``--new-tokens`` tokens. Each project method runs ``sparsectx.training.loop.train_step`` on a
``Trainer`` built as ``src/train.py`` builds it (conf/train.yaml composed with ``method=<name>``,
``--override`` applied, the ``memory`` switches too): ``--batch`` samples a step in micro-batches of
``--micro-batch`` (default: the whole step). The plain-HF reference (``bench_reference.py``) runs the same
step for SCOPD and SCOPD+ (LoRA via peft on the same weights); LT-OPD has no reference (a plain
full-parameter step with a frozen copy does not fit on one H200). With ``distributed.strategy=fsdp`` the
student is sharded over a one-rank group (``sparsectx.training.sharding.process_group``): the sharded code
path's cost on one GPU, to set beside the same command without the override; it has no reference row.
Under ``accelerate launch --num_processes N`` (with ``--no-reference``) ``--batch`` is the global step split
over the processes and the main process prints (its GPU's peak memory); not yet run on several GPUs.

Printed per row: s/sample; rollout ms per token step (prefill included); rollout tokens/s; MFU = model
FLOPs / (step time x measured bf16 matmul peak), FLOPs from parameter counts (2 per parameter per token for a
forward, 4 for a forward+backward through frozen weights, 6 with weight gradients; attention scores left
out); peak memory; and the project's speed-up over the reference. A second table splits each step into
phases (synchronised timers: encode, rollout, teacher, student, probe, backward and update). ``--profile DIR``
profiles one more project step per method: GPU-busy time and top kernels per phase (``bench_profile``).
Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from accelerate import Accelerator
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from transformers import AutoModelForImageTextToText

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import ARCHITECTURES, ROOT, noise_items, real_model  # noqa: E402
from bench_profile import profiled  # noqa: E402
from bench_reference import ReferenceShape, reference_step  # noqa: E402

from sparsectx import encoding  # noqa: E402
from sparsectx.data import Item  # noqa: E402
from sparsectx.models import LoadedModel, adapter_for, resolve_model_path  # noqa: E402
from sparsectx.models.compiled_blocks import COMPILE_BLOCKS, compile_blocks, compile_on  # noqa: E402
from sparsectx.models.loading import set_vision_attention  # noqa: E402
from sparsectx.models.processor import load_processor  # noqa: E402
from sparsectx.models.qwen_common import QwenVLAdapter  # noqa: E402
from sparsectx.models.vision_mlp import align_vision_mlps  # noqa: E402
from sparsectx.training import contexts, loop, prefetch, steps, update  # noqa: E402
from sparsectx.training.batches import TrainingSet, prompt_item  # noqa: E402
from sparsectx.training.config import TrainConfig, load_train_config  # noqa: E402
from sparsectx.training.decode_copy import shard_keeping_twin  # noqa: E402
from sparsectx.training.loop import train_step  # noqa: E402
from sparsectx.training.memory import apply_memory  # noqa: E402
from sparsectx.training.sharding import is_sharded, process_group  # noqa: E402
from sparsectx.training.student import Student, build_student  # noqa: E402
from sparsectx.training.update import Trainer, build_optimizer  # noqa: E402


class Phases:
    """Synchronised wall-clock timers of named phases, summed per step."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds: dict[str, float] = defaultdict(float)

    def sync(self) -> None:
        """Waits for the device's queued work."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        """Adds the wall time of the block (synchronised at both ends) to phase ``name``."""
        self.sync()
        start = time.perf_counter()
        try:
            with torch.profiler.record_function(name.strip()):
                yield
        finally:
            self.sync()
            self.seconds[name] += time.perf_counter() - start


@contextmanager
def instrumented(phases: Phases) -> Iterator[None]:
    """Times the project's step phases by wrapping the module functions ``train_step`` reaches.

    Work on the host-prefetch thread (``prefetch_host_inputs``) is not timed: it overlaps the step, and the
    step's own wait for it is the ``host inputs (wait)`` phase."""
    targets = [
        (update, "step_host_inputs", "host inputs (wait)"), (prefetch, "build_prompts", "  image decode"),
        (prefetch, "processor_inputs", "  processor"), (contexts, "micro_contexts", "encode"),
        (QwenVLAdapter, "encode_images", "  vision tower"),
        (encoding, "question_embeddings", "  question embeds"), (contexts, "select_images", "  pruner"),
        (contexts, "step_prefixes", "rollout"), (steps, "teacher_logits", "teacher"),
        (steps, "_probe_sensitivity", "probe"), (update, "micro_loss", "loss forwards (all)"),
        (update, "offloaded_teacher_logits", "teacher phase (offloaded)"),
        (steps, "response_logits", "  student/probe forward"), (Accelerator, "backward", "backward"),
        (loop, "apply_update", "update"),
    ]  # fmt: skip
    saved = [(module, name, getattr(module, name)) for module, name, _ in targets]

    def wrap(fn, label):
        def timed(*args, **kwargs):
            if threading.current_thread() is not threading.main_thread():  # prefetched: overlaps the step
                return fn(*args, **kwargs)
            with phases(label):
                return fn(*args, **kwargs)

        return timed

    for (module, name, label), (_, _, fn) in zip(targets, saved, strict=True):
        setattr(module, name, wrap(fn, label))
    try:
        yield
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)


def build_model(args, scratch: Path) -> tuple[LoadedModel, int]:
    """Returns the model (random real-size weights on CUDA, or the tiny model) and the image side in pixels."""
    if not args.tiny:
        return real_model(args.arch, args.config, args.visual_tokens, args.compile_blocks, scratch)
    tiny_dir = resolve_model_path("package:tiny-vlm")
    preset = OmegaConf.load(ROOT / "conf/model/tiny.yaml")
    processor = load_processor(tiny_dir, preset.image_workers)
    model = AutoModelForImageTextToText.from_pretrained(tiny_dir, dtype=torch.float32)
    vision = model.config.vision_config
    side = vision.patch_size * vision.spatial_merge_size * round(args.visual_tokens**0.5)
    processor.image_processor.size = {"shortest_edge": side * side, "longest_edge": side * side}
    model.eval()
    set_vision_attention(model, "grouped")
    align_vision_mlps(model, preset.vision_mlp_multiple)
    compile_blocks(model, compile_on(args.compile_blocks or preset.compile_blocks, model.device))
    return LoadedModel(adapter_for(model, signal_chunk=1024), processor), side


def train_config(args, method: str) -> TrainConfig:
    """Returns conf/train.yaml composed for ``method`` at the benchmark's batch and rollout length."""
    processes = int(os.environ.get("WORLD_SIZE", "1"))  # set by the launcher; the step is split over them
    overrides = [
        f"model={'tiny' if args.tiny else args.arch}", f"method={method}", "logger=none",
        f"micro_batch_size={args.micro_batch or args.batch // processes}", f"method.effective_batch_size={args.batch}",
        f"max_new_tokens={args.new_tokens}", "steps=1000", "train_data.path=unused", "runs_root=unused",
        *args.override,
    ]  # fmt: skip
    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        return load_train_config(compose("train", overrides=overrides))


def measure(fn, phases: Phases, repeats: int, warmup: int) -> tuple[float, dict[str, float], float]:
    """Returns (median step seconds, median phase seconds, peak memory GB) of ``fn`` after warm-up steps."""
    totals, split = [], defaultdict(list)
    if phases.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(phases.device)
    for index in range(warmup + repeats):
        phases.seconds.clear()
        phases.sync()
        start = time.perf_counter()
        fn()
        phases.sync()
        if index >= warmup:
            totals.append(time.perf_counter() - start)
            for name, value in phases.seconds.items():
                split[name].append(value)
    peak = torch.cuda.max_memory_allocated(phases.device) / 1e9 if phases.device.type == "cuda" else 0.0
    return statistics.median(totals), {k: statistics.median(v) for k, v in split.items()}, peak


def project_trainer(
    tc: TrainConfig, student: Student, items: list[Item], accelerator: Accelerator
) -> Trainer:
    """Returns a ``Trainer`` at step 0 for ``tc`` around an already-built student."""
    optimizer, scheduler = build_optimizer(tc, student)
    accum = tc.accumulation(accelerator.num_processes)
    data = TrainingSet(items, tc.seed)
    return Trainer(tc, accelerator, student, data, optimizer, scheduler, accum, 0, 0, None)


def context_lengths(trainer: Trainer) -> tuple[int, int, int | None]:
    """Returns the (student, teacher, probe) prompt lengths of the first item at the current step's budget."""
    cfg = trainer.cfg
    budget = update.step_budget(trainer)
    built = contexts.micro_contexts(cfg, trainer.student, trainer.data.items[:1], [0], budget)
    sample = built.encoded[0]
    text = sample.prompt_ids.numel() - sum(image.num_tokens for image in sample.images)
    kept = lambda sel: text + sum(s.indices.numel() for s in sel)  # noqa: E731
    probe = None if built.probe_selections is None else kept(built.probe_selections[0])
    return kept(built.selections[0]), sample.prompt_ids.numel(), probe


def parameter_counts(model: torch.nn.Module) -> dict[str, int]:
    """Returns parameter counts by role: vision blocks, merger, LLM body (no embeddings), LM head."""
    counts = defaultdict(int)
    for name, param in model.named_parameters():
        if "lora_" in name or "embed_tokens" in name or "lm_head" in name:
            continue
        role = ("merger" if "merger" in name else "vision") if "visual" in name else "body"
        counts[role] += param.numel()
    text = model.config.get_text_config()
    counts["head"] = text.vocab_size * text.hidden_size  # tied or not, the head runs per logit row
    return dict(counts)


def step_flops(
    counts: dict[str, int], lengths: tuple[int, int, int | None], batch: int, new: int, visual: int,
    backward_factor: int,
) -> float:  # fmt: skip
    """Returns the model FLOPs of one step (the rule in the module docstring; no recomputation counted)."""
    student, teacher, probe = lengths
    body, head = counts["body"], counts["head"]
    forward = lambda prompt, factor=2: factor * (body * (prompt + new) + head * new)  # noqa: E731
    vision = 2 * counts["vision"] * visual * 4 + 2 * counts["merger"] * visual
    total = vision + forward(student) + forward(teacher) + forward(student, backward_factor)
    if probe is not None:
        total += forward(probe)
    return batch * total


def matmul_peak(device: torch.device) -> float:
    """Returns the measured dense matmul rate in FLOP/s (bf16 8192² on CUDA, fp32 1024² on CPU)."""
    size, dtype = (8192, torch.bfloat16) if device.type == "cuda" else (1024, torch.float32)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    phases = Phases(device)
    for _ in range(3):
        a @ b
    repeats = 20
    with phases("matmul"):
        for _ in range(repeats):
            a @ b
    return 2 * size**3 * repeats / phases.seconds["matmul"]


def ordered_methods(names: list[str], args) -> list[tuple[str, TrainConfig]]:
    """Returns (name, config) per method, LoRA methods first (full-parameter ones change the weights' dtype)."""
    configs = [(name, train_config(args, name)) for name in names]
    return sorted(configs, key=lambda pair: not pair[1].method.lora.enabled)


def run_method(args, name, tc, loaded, lora, accelerator, items, phases):
    """Returns ({impl: (seconds, phases, peak GB)}, lengths, student) for one method and its reference."""
    if tc.method.lora.enabled and lora is not None:
        student = lora
    else:
        if lora is not None:
            model = lora.peft.unload()
            loaded = LoadedModel(adapter_for(model, tc.model.signal_chunk), loaded.processor)
        student = build_student(loaded, tc.method, tc.model.signal_chunk)
        apply_memory(student, tc.memory)
    if tc.distributed.strategy == "fsdp" and not is_sharded(student):  # a one-rank group: the sharded code path
        shard_keeping_twin(student, tc.rollout_weights, tc.teacher_weights, tc.model.signal_chunk,
                           accelerator.device)
    trainer = project_trainer(tc, student, items, accelerator)
    with instrumented(phases):
        results = {"project": measure(lambda: train_step(trainer), phases, args.repeats, args.warmup)}
        if args.profile:
            profiled(lambda: train_step(trainer), Path(args.profile), name)
    lengths = context_lengths(trainer)
    rollout = tc.method.rollout
    if tc.method.lora.enabled and not args.no_reference and not is_sharded(student):
        shape = ReferenceShape(*lengths, args.new_tokens, tc.method.positions.fraction, rollout.do_sample)
        build = lambda row: prompt_item(row[1], tc.train_data, row[0])  # noqa: E731
        rows = list(enumerate(items[: args.batch]))
        params = [p for p in student.trainable.values()]
        optimizer = torch.optim.AdamW(params, lr=tc.method.optim.lr)
        step = lambda: reference_step(student.peft, loaded.processor, build, rows, shape, optimizer, phases)  # noqa: E731
        results["hf-reference"] = measure(step, phases, args.repeats, args.warmup)
    return results, lengths, student


def print_rows(name, results, lengths, flops, peak, args) -> None:
    """Prints one method's rows of the main table and of the phase table."""
    new = args.new_tokens
    for impl, (seconds, split, memory) in results.items():
        rollout = split.get("rollout", float("nan"))
        speed = "" if impl == "project" else f"{seconds / results['project'][0]:.2f}x"
        print(
            f"| {name} | {impl} | {seconds / args.batch:.4f} | {1000 * rollout / new:.2f} | "
            f"{args.batch * new / rollout:.0f} | {100 * flops / (seconds * peak):.1f}% | {memory:.1f} | "
            f"{speed} |",
            flush=True,
        )
        parts = ", ".join(f"{k} {v:.2f}" for k, v in split.items())
        print(
            f"|   phases ({impl}, s/step) | {parts} | lengths student/teacher/probe {lengths} |", flush=True
        )


def main() -> None:
    """Prints the training-step table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="CPU smoke run on the shipped tiny model")
    parser.add_argument("--arch", default="qwen2_5_vl_7b", choices=sorted(ARCHITECTURES))
    parser.add_argument("--config", default=None, help="a local model dir whose config.json to build")
    parser.add_argument("--methods", nargs="+", default=["scopd", "scopd_plus", "lt_opd"])
    parser.add_argument("--batch", type=int, default=32, help="samples per step")
    parser.add_argument(
        "--micro-batch", type=int, default=None, help="micro_batch_size (default: --batch / processes)"
    )
    parser.add_argument("--new-tokens", type=int, default=155)
    parser.add_argument("--visual-tokens", type=int, default=1296, help="merged visual tokens per image")
    parser.add_argument("--override", nargs="*", default=[], help="extra train.yaml overrides (key=value)")
    parser.add_argument("--no-reference", action="store_true", help="skip the plain-HF reference")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--profile", default=None, help="a folder: profile one more project step per method")
    parser.add_argument(
        "--compile-blocks",
        default=None,
        choices=COMPILE_BLOCKS,
        help="model.compile_blocks (default: the preset's)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        run_all(args, Path(scratch))


def run_all(args, scratch: Path) -> None:
    """Prints both tables for every method of ``args`` (a processor GLM needs is built in ``scratch``)."""
    accelerator = Accelerator(cpu=args.tiny)  # first: under a launcher it sets each process's GPU
    if accelerator.num_processes > 1 and not args.no_reference:
        sys.exit("several processes: pass --no-reference (the plain-HF reference step runs on one process)")
    if not accelerator.is_main_process:  # one table: the main process's (peak memory is its GPU's)
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    methods = ordered_methods(args.methods, args)
    strategy = methods[0][1].distributed.strategy
    if strategy == "fsdp":  # the sharded units run eager: the composed config settled auto to off
        if args.compile_blocks == "on":
            sys.exit("--compile-blocks on with distributed.strategy=fsdp: compiled blocks have not been run with "
                     "sharded units; pass --compile-blocks off or leave it out")  # fmt: skip
        args.compile_blocks = methods[0][1].model.compile_blocks
    loaded, side = build_model(args, scratch)
    device = loaded.adapter.model.device
    items = noise_items(args.batch, side, seed=0)
    peak, counts = matmul_peak(device), parameter_counts(loaded.adapter.model)
    name = "tiny" if args.tiny else args.arch
    print(f"# {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, {name}, "
          f"{side}x{side} images ({args.visual_tokens} visual tokens), batch {args.batch}, {args.new_tokens} "
          f"new tokens, matmul peak {peak / 1e12:.0f} TFLOP/s, overrides {args.override}")  # fmt: skip
    print(
        "| method | impl | s/sample | rollout ms/step | rollout tokens/s | MFU | peak GB | project speed-up |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    phases, lora = Phases(device), None
    if strategy == "fsdp" and len({tc.method.lora.enabled for _, tc in methods}) > 1:
        sys.exit("distributed.strategy=fsdp: bench LoRA and full-parameter methods in separate calls (a sharded "
                 "LoRA model cannot be unloaded into a full-parameter student)")  # fmt: skip
    with process_group(strategy, device):
        for name, tc in methods:
            results, lengths, student = run_method(args, name, tc, loaded, lora, accelerator, items, phases)
            lora = student if tc.method.lora.enabled else None
            factor = 4 if tc.method.lora.enabled else 6
            flops = step_flops(counts, lengths, args.batch, args.new_tokens, args.visual_tokens, factor)
            print_rows(name, results, lengths, flops, peak, args)


if __name__ == "__main__":
    main()
