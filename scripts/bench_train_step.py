"""Training-step cost: the project's SCOPD, SCOPD+ and LT-OPD steps against a plain-HF reference.

    python scripts/bench_train_step.py                                  # CUDA, bf16, random Qwen2.5-VL-7B
    python scripts/bench_train_step.py --arch qwen3_vl_4b
    python scripts/bench_train_step.py --methods lt_opd --override memory.activation_checkpointing=true
    python scripts/bench_train_step.py --tiny                           # CPU smoke run on the tiny model
    python scripts/bench_train_step.py --methods scopd_plus --no-reference --override distributed.strategy=fsdp
    python scripts/bench_train_step.py --methods scopd_plus --lengths lognormal --length-seed 0 --json step.json
    accelerate launch --num_processes 4 scripts/bench_train_step.py --methods scopd_plus --no-reference \
        --override distributed.strategy=fsdp

The model is the real architecture with random weights (``bench_common``), images are resized to 1296
merged visual tokens, the budget is the preset's (10% for SCOPD/SCOPD+, LT-OPD's curriculum starts higher).

Rollout lengths (``--lengths``): ``fixed`` runs every rollout ``--new-tokens`` tokens under a cap of the same
(``max_new_tokens``), the figures before issue 44; ``lognormal`` draws each rollout's length from a log-normal
of mean ``--length-mean`` (155: SCOPD's mean generated length, seed 004 App. G, 153.0-155.7 tokens over its
500 diagnostic items) and log-spread ``--length-sigma`` (0.5: the spread of the tiny study's training
rollouts, the ``token_traces.jsonl`` of ``make study``'s runs/tiny_scopd and runs/seed1/tiny_scopd, trained
at commit 762f9b3: standard deviation of log length 0.53 and 0.50 over 208 traced rollouts each, median 24
and 21 of a 48-token cap, 13% at the cap; the tiny model's answers are short, so only their spread is used),
seeded by ``--length-seed``, rounded and clipped to [1, max_new_tokens] under conf/train.yaml's cap (512).
One draw per run: the rollouts of every timed step (and of the reference) get the same lengths, row i the
i-th of the seeded stream (process r of N takes its own slice). Random weights never stop by themselves and
the tiny model stops whenever it likes, so the engine is made to (``ForcedLengths``): a rollout's sampled
token becomes an end-of-turn id at its drawn length (the engine's own end-id stop then ends it; a length at
the cap ends at the cap, unstopped, as a real one does) and a non-end id before it; a few element-wise ops
per decode step, outside the captured graph. With ``rollout_batch_size`` null (conf/train.yaml) the engine
decodes all of a step's rollouts at once, so the longest sets the rollout's decode steps, and the
teacher/student/probe passes run padded to it. Each step's rollouts are checked against the drawn lengths.

Each project method runs ``sparsectx.training.loop.train_step`` on a ``Trainer`` built as ``src/train.py``
builds it (conf/train.yaml composed with ``method=<name>``, ``--override`` applied, the ``memory`` switches
too): ``--batch`` samples a step in micro-batches of ``--micro-batch`` (default: the whole step). The
plain-HF reference (``bench_reference.py``) runs the same step for SCOPD and SCOPD+ (LoRA via peft on the
same weights), every rollout decoded to the step's longest drawn length (what HF ``generate`` computes for
a padded batch anyway: transformers 5.17 ``GenerationMixin._sample`` runs every row until the last one
finishes); LT-OPD has no reference (a plain full-parameter step with a frozen copy does not fit on one
H200). With ``distributed.strategy=fsdp`` the
student is sharded over a one-rank group (``sparsectx.training.sharding.process_group``): the sharded code
path's cost on one GPU, to set beside the same command without the override; it has no reference row.
Under ``accelerate launch --num_processes N`` (with ``--no-reference``) ``--batch`` is the global step split
over the processes and the main process prints (its GPU's peak memory); not yet run on several GPUs.

Printed per row: s/sample; rollout ms per decode step of the longest rollout (prefill included); rollout
tokens/s, counted from the rollouts the step got back (the engine's generations; HF's sequences after the
prompt); their lengths (min / median / p90 / max); MFU = model FLOPs / (step time x measured bf16 matmul
peak), FLOPs from parameter counts over the tokens of every rollout row (2 per parameter per token for a
forward, 4 for a forward+backward through frozen weights, 6 with weight gradients; padding and attention
scores left out); peak memory; and the project's speed-up over the reference. ``--json PATH`` writes every
row (its rollout lengths included) and the run's facts. A second table splits each step into
phases (synchronised timers: encode, rollout, teacher, student, probe, backward and update). ``--profile DIR``
profiles one more project step per method: GPU-busy time and top kernels per phase (``bench_profile``).
Asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from accelerate import Accelerator
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from transformers import AutoModelForImageTextToText

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import (  # noqa: E402
    ARCHITECTURES,
    ROOT,
    GeneratedLengths,
    hf_lengths,
    noise_items,
    rate_text,
    real_model,
    run_facts,
    tokens_per_second,
    unless_out_of_memory,
    write_json,
)
from bench_profile import profiled  # noqa: E402
from bench_reference import ReferenceShape, reference_step  # noqa: E402

from sparsectx import encoding  # noqa: E402
from sparsectx.data import Item  # noqa: E402
from sparsectx.engine import decode  # noqa: E402
from sparsectx.generation import SamplingConfig  # noqa: E402
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
from sparsectx.training.rollout import Prefix  # noqa: E402
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
        (update, "step_host_inputs", "host inputs (wait)"),
        (prefetch, "build_prompts", "  image decode"),
        (prefetch, "processor_inputs", "  processor"),
        (contexts, "micro_contexts", "encode"),
        (QwenVLAdapter, "encode_images", "  vision tower"),
        (encoding, "question_embeddings", "  question embeds"),
        (contexts, "select_images", "  pruner"),
        (contexts, "step_prefixes", "rollout"),
        (steps, "teacher_logits", "teacher"),
        (steps, "_probe_sensitivity", "probe"),
        (update, "micro_loss", "loss forwards (all)"),
        (update, "offloaded_teacher_logits", "teacher phase (offloaded)"),
        (steps, "response_logits", "  student/probe forward"),
        (Accelerator, "backward", "backward"),
        (loop, "apply_update", "update"),
    ]
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


@dataclass
class RolloutLengths:
    """How long the bench makes each rollout of a step (``--lengths``; the module docstring gives the sources)."""

    kind: str
    """``fixed``: every rollout ``new_tokens`` long; ``lognormal``: drawn, seeded."""
    new_tokens: int
    mean: float
    """The log-normal's mean length in tokens (before rounding and clipping)."""
    sigma: float
    """The standard deviation of the log of the length."""
    seed: int
    cap: int
    """The rollout cap (``max_new_tokens``): no drawn length exceeds it."""

    def draw(self, count: int, rank: int = 0) -> list[int]:
        """Returns the lengths of ``count`` rollouts, process ``rank``'s slice of one seeded stream (the same
        lengths for the same seed, whatever is drawn later)."""
        if self.kind == "fixed":
            return [self.new_tokens] * count
        generator = random.Random(self.seed)
        mu = math.log(self.mean) - self.sigma**2 / 2  # a log-normal's mean is exp(mu + sigma^2 / 2)
        stream = [round(generator.lognormvariate(mu, self.sigma)) for _ in range(count * (rank + 1))]
        return [min(self.cap, max(1, length)) for length in stream[rank * count :]]

    def text(self) -> str:
        """Returns the distribution in words, for the table's header."""
        if self.kind == "fixed":
            return f"fixed {self.new_tokens}-token rollouts"
        return (
            f"log-normal rollout lengths (mean {self.mean:g}, sigma {self.sigma:g}, seed {self.seed}, cap {self.cap})"
        )


class ForcedLengths:
    """Makes the decode engine end each rollout at its drawn length (the module docstring says why).

    The engine has no per-sequence cap, so this wraps two of its internals while active: ``_Run.fill`` (after
    it places prompts in free slots, each slot's target becomes its prompt's drawn length) and the
    ``choose_next`` that ``_Run.advance`` calls (the chosen token of a slot at its target becomes an end id,
    any end id before it a non-end id). The engine's own stop rule (``stops.StopCriteria``) then ends the
    slot, so its generation, ``stopped`` flag and refill timing are the engine's.
    """

    def __init__(self, lengths: RolloutLengths, rank: int) -> None:
        self.lengths, self.rank = lengths, rank
        self.run: decode._Run | None = None
        self.targets: torch.Tensor | None = None
        """(slots,) each slot's drawn length; a slot at the cap is left to the engine's cap."""
        self.drawn: list[int] = []
        self.filler = 0
        """A token id that ends nothing: what a natural end id before the target becomes."""

    @contextmanager
    def active(self) -> Iterator[None]:
        """Forces the lengths of every engine call inside the block."""
        fill, choose = decode._Run.fill, decode.choose_next

        def forced_fill(run: decode._Run) -> None:
            before = list(run.occupant)
            fill(run)
            self.place(run, before)

        def forced_choice(
            logits: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator | None
        ) -> torch.Tensor:
            return self.force(choose(logits, sampling, generator))

        decode._Run.fill, decode.choose_next = forced_fill, forced_choice
        try:
            yield
        finally:
            decode._Run.fill, decode.choose_next = fill, choose
            self.run = self.targets = None

    def place(self, run: decode._Run, before: list[int | None]) -> None:
        """Sets the target length of every slot ``run`` just filled (a new call draws its prompts' lengths)."""
        if run is not self.run:
            if not run.stops.end_ids:
                raise ValueError("the engine knows no end-of-turn id (tokenizer or generation_config) to end a rollout")
            self.run, self.drawn = run, self.lengths.draw(len(run.prompts), self.rank)
            cap = run.sampling.max_new_tokens
            self.targets = torch.full((run.slots,), cap, dtype=torch.long, device=run.count.device)
            ends = set(run.stops.end_ids)
            self.filler = next(token for token in range(len(ends) + 1) if token not in ends)
        filled = [slot for slot, index in enumerate(run.occupant) if index is not None and before[slot] is None]
        if filled:
            drawn = torch.tensor([self.drawn[run.occupant[slot]] for slot in filled], dtype=torch.long)
            self.targets[filled] = drawn.to(self.targets.device)

    def force(self, tokens: torch.Tensor) -> torch.Tensor:
        """Returns the (slots,) chosen tokens with each slot's end placed at its target length."""
        run = self.run
        ends = run.stops.ends
        chosen = run.count + 1  # the 1-based index of the token being chosen: advance counts it next
        at_target = (chosen >= self.targets) & (self.targets < run.sampling.max_new_tokens)
        tokens = torch.where(torch.isin(tokens, ends), self.filler, tokens)
        return torch.where(at_target, ends[0], tokens)


@contextmanager
def recorded_rollouts(steps: list[list[int]]) -> Iterator[None]:
    """Appends to ``steps`` the length of every rollout each project step got back (``contexts.step_prefixes``:
    the engine's generations, in the step's row order)."""
    original = contexts.step_prefixes

    def recording(*args: object, **kwargs: object) -> list[Prefix]:
        prefixes = original(*args, **kwargs)
        steps.append([tokens.numel() for prefix in prefixes for tokens in prefix.tokens])
        return prefixes

    contexts.step_prefixes = recording
    try:
        yield
    finally:
        contexts.step_prefixes = original


@contextmanager
def recorded_hf_rollouts(peft: torch.nn.Module, steps: list[list[int]]) -> Iterator[None]:
    """Appends to ``steps`` the tokens each row of the reference's ``generate`` call generated, counted from the
    sequences it returns (``bench_reference`` gives it no eos, so every new column: ``hf_lengths``)."""
    original = peft.generate

    def recording(*args: object, **kwargs: object) -> torch.Tensor:
        out = original(*args, **kwargs)
        steps.append(hf_lengths(out, kwargs["input_ids"].shape[1], end_ids=()))
        return out

    peft.generate = recording
    try:
        yield
    finally:
        del peft.generate  # the instance attribute: the class's method shows through again


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


def train_config(args: argparse.Namespace, method: str) -> TrainConfig:
    """Returns conf/train.yaml composed for ``method`` at the benchmark's batch and rollout cap (``fixed``:
    ``--new-tokens``; ``lognormal``: the composed ``max_new_tokens``)."""
    processes = int(os.environ.get("WORLD_SIZE", "1"))  # set by the launcher; the step is split over them
    overrides = [
        f"model={'tiny' if args.tiny else args.arch}",
        f"method={method}",
        "logger=none",
        f"micro_batch_size={args.micro_batch or args.batch // processes}",
        f"method.effective_batch_size={args.batch}",
        "steps=1000",
        "train_data.path=unused",
        "runs_root=unused",
    ]
    if args.lengths == "fixed":
        overrides.append(f"max_new_tokens={args.new_tokens}")
    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        return load_train_config(compose("train", overrides=[*overrides, *args.override]))


@dataclass
class Measured:
    """One implementation's timed steps: median step and phase seconds, peak memory, and the lengths of the
    rollouts each timed step got back."""

    seconds: float
    phases: dict[str, float]
    peak_gb: float
    rollouts: GeneratedLengths


def measure(fn: Callable[[], object], phases: Phases, args: argparse.Namespace, recorded: list[list[int]]) -> Measured:
    """Returns the timing of ``fn`` (one step) over ``--repeats`` steps after ``--warmup`` ones, with the rollout
    lengths that ``recorded`` (filled by a ``recorded_*`` context around the steps) gives for the timed ones.

    Raises:
        RuntimeError: the timed steps' rollouts differ in length (every step's are forced to the same).
    """
    totals, split = [], defaultdict(list)
    recorded.clear()
    if phases.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(phases.device)
    for index in range(args.warmup + args.repeats):
        phases.seconds.clear()
        phases.sync()
        start = time.perf_counter()
        fn()
        phases.sync()
        if index >= args.warmup:
            totals.append(time.perf_counter() - start)
            for name, value in phases.seconds.items():
                split[name].append(value)
    timed = recorded[-args.repeats :]
    if len(timed) != args.repeats or any(lengths != timed[0] for lengths in timed):
        raise RuntimeError(f"the timed steps' rollouts came back at different lengths: {timed}")
    peak = torch.cuda.max_memory_allocated(phases.device) / 1e9 if phases.device.type == "cuda" else 0.0
    medians = {k: statistics.median(v) for k, v in split.items()}
    return Measured(statistics.median(totals), medians, peak, GeneratedLengths(timed[0]))


def project_trainer(tc: TrainConfig, student: Student, items: list[Item], accelerator: Accelerator) -> Trainer:
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
    counts: dict[str, int],
    lengths: tuple[int, int, int | None],
    batch: int,
    rollouts: list[int],
    visual: int,
    backward_factor: int,
) -> float:
    """Returns the model FLOPs of one step (the rule in the module docstring; no recomputation counted): the
    vision tower once per prompt, the language-model passes once per rollout row at its own length."""
    student, teacher, probe = lengths
    body, head = counts["body"], counts["head"]
    forward = lambda prompt, new, factor=2: factor * (body * (prompt + new) + head * new)  # noqa: E731
    total = batch * (2 * counts["vision"] * visual * 4 + 2 * counts["merger"] * visual)
    for new in rollouts:
        total += forward(student, new) + forward(teacher, new) + forward(student, new, backward_factor)
        if probe is not None:
            total += forward(probe, new)
    return total


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


def ordered_methods(names: list[str], args: argparse.Namespace) -> list[tuple[str, TrainConfig]]:
    """Returns (name, config) per method, LoRA methods first (full-parameter ones change the weights' dtype)."""
    configs = [(name, train_config(args, name)) for name in names]
    return sorted(configs, key=lambda pair: not pair[1].method.lora.enabled)


@dataclass
class Setup:
    """What every method of a run is timed with."""

    args: argparse.Namespace
    accelerator: Accelerator
    items: list[Item]
    phases: Phases
    forced: ForcedLengths


def method_student(tc: TrainConfig, loaded: LoadedModel, lora: Student | None, device: torch.device) -> Student:
    """Returns the student of ``tc``: the LoRA student already built, or a fresh one (after unloading LoRA)."""
    if tc.method.lora.enabled and lora is not None:
        return lora
    if lora is not None:
        model = lora.peft.unload()
        loaded = LoadedModel(adapter_for(model, tc.model.signal_chunk), loaded.processor)
    student = build_student(loaded, tc.method, tc.model.signal_chunk)
    apply_memory(student, tc.memory)
    if tc.distributed.strategy == "fsdp" and not is_sharded(student):  # a one-rank group: the sharded code path
        shard_keeping_twin(student, tc.rollout_weights, tc.teacher_weights, tc.model.signal_chunk, device)
    return student


def run_method(
    setup: Setup, name: str, tc: TrainConfig, loaded: LoadedModel, lora: Student | None
) -> tuple[dict[str, Measured | None], tuple[int, int, int | None], Student]:
    """Returns ({impl: its timing, None where the reference ran out of GPU memory}, prompt lengths, student) for
    one method and its reference.

    Raises:
        SystemExit: the project's rollouts did not come back at the drawn lengths.
    """
    args, phases = setup.args, setup.phases
    student = method_student(tc, loaded, lora, setup.accelerator.device)
    trainer = project_trainer(tc, student, setup.items, setup.accelerator)
    recorded: list[list[int]] = []
    with instrumented(phases), setup.forced.active(), recorded_rollouts(recorded):
        results = {"project": measure(lambda: train_step(trainer), phases, args, recorded)}
        if args.profile:
            profiled(lambda: train_step(trainer), Path(args.profile), name)
    got = results["project"].rollouts.lengths
    drawn = setup.forced.lengths.draw(len(got), setup.accelerator.process_index)
    if got != drawn:
        sys.exit(
            f"{name}: the rollouts came back {got} tokens long, not the drawn {drawn}; the bench forces end ids "
            "only, so a stop string (method.rollout.stop_strings in --override) may have ended them: leave it out"
        )
    lengths = context_lengths(trainer)
    rollout = tc.method.rollout
    if tc.method.lora.enabled and not args.no_reference and not is_sharded(student):
        shape = ReferenceShape(*lengths, max(got), tc.method.positions.fraction, rollout.do_sample)
        build = lambda row: prompt_item(row[1], tc.train_data, row[0])  # noqa: E731
        rows = list(enumerate(setup.items[: args.batch]))
        optimizer = torch.optim.AdamW(list(student.trainable.values()), lr=tc.method.optim.lr)
        step = lambda: reference_step(student.peft, loaded.processor, build, rows, shape, optimizer, phases)  # noqa: E731
        with recorded_hf_rollouts(student.peft, recorded):
            results["hf-reference"], out_of_memory = unless_out_of_memory(lambda: measure(step, phases, args, recorded))
        if out_of_memory is not None:
            print(f"# {name} hf-reference: {out_of_memory}", flush=True)
    return results, lengths, student


def method_rows(
    name: str,
    results: dict[str, Measured | None],
    lengths: tuple[int, int, int | None],
    flops: float,
    peak: float,
    batch: int,
) -> list[dict[str, object]]:
    """Prints one method's rows of the main table and of the phase table; returns them for ``--json``."""
    rows = []
    for impl, measured in results.items():
        if measured is None:
            rows.append({"method": name, "impl": impl, "status": "oom"})
            print(f"| {name} | {impl} | OOM | | | | | | |", flush=True)
            continue
        rollout = measured.phases.get("rollout", float("nan"))
        tokens = measured.rollouts.tokens
        longest = max(measured.rollouts.lengths)
        speed = None if impl == "project" else measured.seconds / results["project"].seconds
        row = {
            "method": name,
            "impl": impl,
            "status": "ok",
            "s_per_sample": measured.seconds / batch,
            "step_s": measured.seconds,
            "rollout_s": rollout,
            "rollout_tokens": tokens,
            "lengths": measured.rollouts.lengths,
            "length_summary": measured.rollouts.summary(),
            "rollout_ms_per_step": 1000 * rollout / longest,
            "rollout_tokens_per_s": tokens_per_second(tokens, rollout),
            "mfu": flops / (measured.seconds * peak),
            "peak_gb": measured.peak_gb,
            "project_speedup": speed,
            "phases": measured.phases,
            "prompt_lengths": {"student": lengths[0], "teacher": lengths[1], "probe": lengths[2]},
        }
        rows.append(row)
        print(
            f"| {name} | {impl} | {row['s_per_sample']:.4f} | {row['rollout_ms_per_step']:.2f} | "
            f"{rate_text(tokens, rollout)} | {measured.rollouts.text()} | {100 * row['mfu']:.1f}% | "
            f"{measured.peak_gb:.1f} | {'' if speed is None else f'{speed:.2f}x'} |",
            flush=True,
        )
        parts = ", ".join(f"{k} {v:.2f}" for k, v in measured.phases.items())
        print(f"|   phases ({impl}, s/step) | {parts} | lengths student/teacher/probe {lengths} |", flush=True)
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Returns the command line, refusing lengths that cannot be drawn."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="CPU smoke run on the shipped tiny model")
    parser.add_argument("--arch", default="qwen2_5_vl_7b", choices=sorted(ARCHITECTURES))
    parser.add_argument("--config", default=None, help="a local model dir whose config.json to build")
    parser.add_argument("--methods", nargs="+", default=["scopd", "scopd_plus", "lt_opd"])
    parser.add_argument("--batch", type=int, default=32, help="samples per step")
    parser.add_argument("--micro-batch", type=int, default=None, help="micro_batch_size (default: --batch / processes)")
    parser.add_argument(
        "--lengths", default="fixed", choices=["fixed", "lognormal"], help="rollout lengths (module docstring)"
    )
    parser.add_argument("--new-tokens", type=int, default=155, help="--lengths fixed: every rollout's length")
    parser.add_argument("--length-mean", type=float, default=155.0, help="--lengths lognormal: mean tokens")
    parser.add_argument("--length-sigma", type=float, default=0.5, help="--lengths lognormal: sd of log length")
    parser.add_argument("--length-seed", type=int, default=0, help="--lengths lognormal: the draw's seed")
    parser.add_argument("--visual-tokens", type=int, default=1296, help="merged visual tokens per image")
    parser.add_argument("--override", nargs="*", default=[], help="extra train.yaml overrides (key=value)")
    parser.add_argument("--no-reference", action="store_true", help="skip the plain-HF reference")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--profile", default=None, help="a folder: profile one more project step per method")
    parser.add_argument(
        "--compile-blocks", default=None, choices=COMPILE_BLOCKS, help="model.compile_blocks (default: the preset's)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every row to this JSON file")
    args = parser.parse_args(argv)
    if args.new_tokens < 1 or args.length_mean <= 0 or args.length_sigma < 0:
        parser.error(
            f"--new-tokens {args.new_tokens} / --length-mean {args.length_mean} / --length-sigma "
            f"{args.length_sigma}: lengths are at least 1 token, the mean positive, the spread >= 0"
        )
    if args.repeats < 1 or args.warmup < 0:
        parser.error(f"--repeats {args.repeats} / --warmup {args.warmup}: time at least one step, warm up >= 0")
    return args


def main() -> None:
    """Prints the training-step table (and writes it to ``--json``)."""
    args = parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        run_all(args, Path(scratch))


def run_all(args: argparse.Namespace, scratch: Path) -> None:
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
            sys.exit(
                "--compile-blocks on with distributed.strategy=fsdp: compiled blocks have not been run with "
                "sharded units; pass --compile-blocks off or leave it out"
            )
        args.compile_blocks = methods[0][1].model.compile_blocks
    if strategy == "fsdp" and len({tc.method.lora.enabled for _, tc in methods}) > 1:
        sys.exit(
            "distributed.strategy=fsdp: bench LoRA and full-parameter methods in separate calls (a sharded "
            "LoRA model cannot be unloaded into a full-parameter student)"
        )
    lengths = RolloutLengths(
        args.lengths,
        args.new_tokens,
        args.length_mean,
        args.length_sigma,
        args.length_seed,
        methods[0][1].max_new_tokens,
    )
    loaded, side = build_model(args, scratch)
    device = loaded.adapter.model.device
    setup = Setup(
        args,
        accelerator,
        noise_items(args.batch, side, seed=0),
        Phases(device),
        ForcedLengths(lengths, accelerator.process_index),
    )
    peak, counts = matmul_peak(device), parameter_counts(loaded.adapter.model)
    record = {
        "script": "bench_train_step.py",
        **run_facts(device),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "rollout_lengths": asdict(lengths),
        "matmul_peak_flops": peak,
        "rows": [],
    }
    print(
        f"# {record['device']}, {'tiny' if args.tiny else args.arch}, {side}x{side} images ({args.visual_tokens} "
        f"visual tokens), batch {args.batch}, {lengths.text()}, matmul peak {peak / 1e12:.0f} TFLOP/s, "
        f"overrides {args.override}"
    )
    print(
        "| method | impl | s/sample | rollout ms/step | rollout tokens/s | rollout tokens (min / median / p90 / "
        "max) | MFU | peak GB | project speed-up |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    lora = None
    with process_group(strategy, device):
        for name, tc in methods:
            results, prompt_lengths, student = run_method(setup, name, tc, loaded, lora)
            lora = student if tc.method.lora.enabled else None
            factor = 4 if tc.method.lora.enabled else 6
            rollouts = results["project"].rollouts.lengths
            flops = step_flops(counts, prompt_lengths, args.batch, rollouts, args.visual_tokens, factor)
            record["rows"].extend(method_rows(name, results, prompt_lengths, flops, peak, args.batch))
            if args.json is not None and accelerator.is_main_process:
                write_json(args.json, record)


if __name__ == "__main__":
    main()
