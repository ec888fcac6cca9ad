"""Schema of ``conf/evaluate.yaml`` and its groups, checked when the config is loaded.

Every field is required here: the YAML files are the single source of values (no defaults in code).
``load_eval_config`` merges a composed ``DictConfig`` into this schema, so an unknown, missing or
mistyped key is an error naming the full key, and each ``__post_init__`` checks ranges and combinations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from sparsectx.budget import check_budget
from sparsectx.checks import check_choice
from sparsectx.config_schema import CONFIG_ERRORS, load_config
from sparsectx.data.config import PromptConfig
from sparsectx.data.layout import BenchLayout
from sparsectx.data.video import SAMPLING_RULES, SAVE_VIDEO_FRAMES
from sparsectx.engine.config import EngineConfig
from sparsectx.eval.scorers import SCORERS
from sparsectx.generation import DecodingConfig
from sparsectx.models import ModelConfig
from sparsectx.paths import CONF_DIR  # the package's conf/ (a checkout's, or a wheel's copy); re-exported here
from sparsectx.pruning.config import PrunerConfig
from sparsectx.tracking import LoggerConfig

MODES = ("greedy", "passk", "efficiency")
GROUP_BY = ("none", "image", "circular")
SUBSET_FIELDS = ("none", "subset", "category", "l2-category", "cycle_category", "source", "task_type")
SHARD_SOURCES = ("none", "torchrun", "slurm")
EFFICIENCY_PROTOCOLS = ("ltopd", "quick")
"""Efficiency protocols (``efficiency.protocol``; ``sparsectx.eval.efficiency_protocol`` states each)."""
PAPER_NUMERIC = "paper_numeric"
AUTHORS_CODE = "authors_code"
COHORTS = (PAPER_NUMERIC, AUTHORS_CODE)
"""Pass@K cohort protocols (``passk.cohort``; ``sparsectx.eval.passk_cohort`` states each rule)."""


def check_seed(seed: object, key: str) -> int:
    """Returns ``seed`` if it is a plain int (0 included); otherwise raises naming the key."""
    if seed is None or isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"{key}={seed!r} must be an int (seeds are required; 0 is a valid seed)")
    return seed


BUDGET_UNITS = ("video",)


@dataclass
class VideoSpec:
    """How a video benchmark's clips become model input (``bench.<name>.video``)."""

    frames: int
    """Frames sampled per video (by ``sampling``); SCOPD: 32."""
    max_tokens: int
    """Cap on one video's post-merger visual tokens (frames are resized to fit); SCOPD: 12,288."""
    budget_unit: str
    """What a budget b is a fraction of: ``video``, all of one video's tokens (k = clamp(round(b N), 1, N)
    over its N tokens, every temporal patch together; each kept token keeps its temporal and spatial
    position)."""
    root: str
    """Folder that the ``video`` column's names are relative to: absolute, or relative to the folder holding
    the benchmark file ("" = that folder), as VLMEvalKit's video classes keep their clips beside their TSV
    (``prepare_dataset``'s ``root``; Video-MME's ``video/``). Unused by files whose frames are embedded."""
    suffix: str
    """Appended to a ``video`` cell to name its file (``.mp4``); "" names a frame folder or a full name."""
    folder_fps: float
    """Frame rate of pre-extracted frame folders (their frames' times); video files carry their own."""
    sampling: str
    """Which frames are taken, named after the VLMEvalKit function it restates (``sparsectx.data.video``):
    ``save_video_frames`` (``int(i * total / (frames + 1))``, i = 1..frames: Video-MME, MLVU, TempCompass,
    Video-TT), ``get_index`` (``MVBench.get_index``: segment midpoints of the row's window) or ``strict``
    (``save_video_frames``' frames, a clip with fewer than ``frames`` a counted skip: the synthetic files).
    The VLMEvalKit rules repeat frames of a clip shorter than ``frames``, as VLMEvalKit does."""
    prefix_column: str = ""
    """A column whose cell is a folder between ``root`` and the ``video`` cell (MVBench's and MLVU's
    ``prefix``: ``osp.join(data_root, line['prefix'], line['video'])``); "" = none."""
    suffix_column: str = ""
    """A column whose cell is appended to the ``video`` cell instead of ``suffix`` (TempCompass's ``suffix``)."""
    bound_column: str = ""
    """A column whose true cell asks about the window ``start_column``..``end_column`` (seconds) of the clip
    only (MVBench's ``bound``, ``start``, ``end``); "" = whole clips. All three are named, or none."""
    start_column: str = ""
    end_column: str = ""

    def __post_init__(self) -> None:
        if self.frames < 1 or self.max_tokens < 1 or not self.folder_fps > 0:
            raise ValueError(
                f"bench.*.video: frames={self.frames} and max_tokens={self.max_tokens} must be >= 1 and "
                f"folder_fps={self.folder_fps} > 0"
            )
        check_choice(self.budget_unit, BUDGET_UNITS, "bench.*.video.budget_unit")
        check_choice(self.sampling, SAMPLING_RULES, "bench.*.video.sampling")
        window = (self.bound_column, self.start_column, self.end_column)
        if any(window) and not all(window):
            raise ValueError(
                f"bench.*.video: bound_column={self.bound_column!r}, start_column={self.start_column!r} and "
                f"end_column={self.end_column!r}: name all three (MVBench: bound, start, end) or none"
            )
        if any(window) and self.sampling == SAVE_VIDEO_FRAMES:
            raise ValueError(
                f"bench.*.video: sampling={self.sampling!r} ignores windows in VLMEvalKit (its windows are "
                f"MVBench.get_index's); use sampling=get_index with bound_column={self.bound_column!r}, or drop "
                "the window columns"
            )


@dataclass
class BenchSpec:
    """One benchmark (``conf/bench/<name>.yaml``, stored under ``bench.<name>``)."""

    name: str
    """Registry-style key; equals the YAML stem and the key under ``bench``."""
    dataset_name: str
    """VLMEvalKit's exact spelling of the dataset (the synthetic benches use their own name)."""
    path: str | None
    """Where the file is: a TSV (one-file benchmarks) or a folder holding ``layout.files``, relative to the
    launch directory or absolute; null = VLMEvalKit's data folder (``$LMUData``, else ``~/LMUData``), then
    ``data/`` (``sparsectx.eval.protocol.bench_files``)."""
    scorer: str
    """Key in ``sparsectx.eval.scorers.SCORERS``."""
    max_new_tokens: int
    """Generation cap of greedy evaluation on this benchmark."""
    layout: BenchLayout
    """How the file is read and each row asked and scored (``sparsectx.data.layout``)."""
    group_by: str
    """How ``ScoredItem.group`` is filled: ``none``; ``image`` (the ``image_path`` column, MME's pairs, or
    the image hash in files without that column);
    ``circular`` (``index % 1_000_000``, the base question of MMBench's circular rotations)."""
    subset_field: str
    """Column that fills ``ScoredItem.subset``: ``none``, ``subset`` (synthetic POPE), ``category``
    (VLMEvalKit's POPE file), ``l2-category`` (VLMEvalKit's HallusionBench file), ``cycle_category``
    (HR-Bench), ``source`` (CV-Bench) or ``task_type`` (TempCompass, whose rule depends on it)."""
    video: VideoSpec | None = None
    """A video benchmark's frame settings; None (the default, every image benchmark) = no videos."""
    headline: str | None = None
    """Which of the scorer's metrics is this benchmark's ``score``, for a scorer that reports several
    (``ScorerSpec.headlines``; POPE: ``macro_accuracy`` or ``f1``), where it must be set; null for every other."""

    def __post_init__(self) -> None:
        key = f"bench.{self.name}"
        if self.max_new_tokens < 1:
            raise ValueError(f"{key}.max_new_tokens={self.max_new_tokens} must be >= 1")
        check_choice(self.group_by, GROUP_BY, f"{key}.group_by")
        check_choice(self.subset_field, SUBSET_FIELDS, f"{key}.subset_field")
        SCORERS.get(self.scorer).check_headline(self.headline, f"{key}.headline")  # unknown scorer: raises


@dataclass
class PasskConfig:
    """``mode=passk``: fixed-context Pass@K (spec training_methods.md section 7)."""

    n: int
    """Samples drawn per cohort item from its one sparse context."""
    hit_m: list[int]
    """The m of each reported Hit>=m@n (fraction of items with at least m correct samples)."""
    sampling: DecodingConfig
    """Sampling settings of the n draws (the seeds: T=0.7, top-p 0.95, top-k 50)."""
    max_new_tokens: int
    """Generation cap of every draw and of the greedy reference runs."""
    sample_batch: int
    """Draws generated together (copies of the same context in one batch)."""
    full_context_leaf: str | None
    """Leaf directory of a finished budget-1.0 greedy evaluation: the cohort is the items whose rows in its
    ``<bench>.predictions.jsonl`` are correct. null = run that full-context greedy pass here first."""
    max_items: int | None
    """Keep at most this many cohort items of each benchmark; null = all."""
    no_image_control: bool
    """Also run the language-prior control: the same question asked with no image at all."""
    cohort: str
    """Which items are drawn from (``sparsectx.eval.passk_cohort``): ``paper_numeric`` (SCOPD App. A: free-form
    numerical questions, multiple-choice rows asked without their all-numeric options, that the full-context
    greedy model answers; computed here, ``full_context_leaf`` is not read) or ``authors_code`` (the authors'
    code: the benchmark's own items that ``full_context_leaf``'s greedy run answered, in file order)."""
    source_caps: dict[str, int]
    """``paper_numeric``: benchmark -> the most cohort items it gives (SCOPD App. A's counts: MMStar 160, CVBench
    64, MMMU-Pro 57, BLINK 70, LogicVista 33), taken in a seeded order; a benchmark not listed has no cap of
    its own. ``authors_code`` takes ``max_items`` only."""

    def __post_init__(self) -> None:
        if self.n < 1 or self.sample_batch < 1 or self.max_new_tokens < 1:
            raise ValueError(
                f"passk.n={self.n}, passk.sample_batch={self.sample_batch} and passk.max_new_tokens="
                f"{self.max_new_tokens} must all be >= 1"
            )
        for m in self.hit_m:
            if not 1 <= m <= self.n:
                raise ValueError(f"passk.hit_m={list(self.hit_m)}: every m must lie in [1, passk.n={self.n}]")
        if not self.sampling.do_sample:
            raise ValueError("passk.sampling.do_sample=false: Pass@K draws samples; set it to true")
        if self.max_items is not None and self.max_items < 1:
            raise ValueError(f"passk.max_items={self.max_items} must be >= 1 or null")
        check_choice(self.cohort, COHORTS, "passk.cohort")
        for bench, cap in self.source_caps.items():
            if cap < 1:
                raise ValueError(f"passk.source_caps.{bench}={cap} must be >= 1 (leave a benchmark out for no cap)")


@dataclass
class EfficiencyConfig:
    """``mode=efficiency``: analytic FLOPs, KV-cache bytes and timed latency per budget."""

    protocol: str
    """How items are chosen, decoded and timed (``sparsectx.eval.efficiency_protocol``): ``ltopd`` (LT-OPD
    App. E.1: the questions whose most frequent human answer has at least ``min_answer_tokens`` tokens, a
    replayed ``decode_tokens``-token reference, timed from the processor's CPU tensors to the decoded text, mean
    over repetitions then over questions) or ``quick`` (the first items, ``decode_tokens`` greedy steps, the
    tower timed on pixels already on the device, median over repetitions then mean over items)."""
    budgets: list[float]
    """Budgets measured; the unpruned model (1.0) is always measured too and is every ratio's denominator."""
    bench: str
    """Benchmark (a key of ``bench``) whose items are measured."""
    num_items: int | None
    """Items measured (batch size 1 each): the first of the benchmark (``quick``) or of the selected questions
    (``ltopd``); null = all of them (LT-OPD: all 305 selected questions)."""
    min_answer_tokens: int
    """``ltopd``: the selection threshold, in the model's own tokenizer's tokens (LT-OPD: six Qwen tokens)."""
    repetitions: int
    """Timed repetitions per item and budget; summarised by the protocol's statistic (mean or median)."""
    warmup: int
    """Untimed repetitions before the timed ones."""
    decode_tokens: int
    """Tokens decoded after prefill (fixed length: stop tokens are ignored): ``quick``'s greedy steps, or the
    length of ``ltopd``'s replayed reference (1 prefill + ``decode_tokens - 1`` incremental forwards)."""
    count_flops: bool
    """Also count the prefill FLOPs with ``torch.utils.flop_counter.FlopCounterMode`` (a cross-check)."""

    def __post_init__(self) -> None:
        check_choice(self.protocol, EFFICIENCY_PROTOCOLS, "efficiency.protocol")
        if not self.budgets:
            raise ValueError("efficiency.budgets is empty; list the budgets to measure, e.g. [0.05, 0.1]")
        for i, budget in enumerate(self.budgets):
            check_budget(budget, f"efficiency.budgets[{i}]")
        if self.num_items is not None and self.num_items < 1:
            raise ValueError(f"efficiency.num_items={self.num_items} must be >= 1 or null (all items)")
        if self.min_answer_tokens < 1 or self.repetitions < 1 or self.warmup < 0 or self.decode_tokens < 1:
            raise ValueError(
                "efficiency.min_answer_tokens, efficiency.repetitions and efficiency.decode_tokens must be >= 1 "
                f"and efficiency.warmup >= 0; got {self.min_answer_tokens}, {self.repetitions}, "
                f"{self.decode_tokens}, {self.warmup}"
            )


@dataclass
class ShardConfig:
    """Data-parallel greedy evaluation (``shard``): which share of every benchmark this process generates.

    A shard is a contiguous run of whole engine calls (``queue_size`` items each), so every item is decoded
    in the same batch as in a one-process run and the merged files are that run's bytes
    (``sparsectx.eval.sharding``).
    """

    count: int
    """Processes sharing each benchmark; 1 = this process generates and scores everything."""
    index: int
    """This process's share, in [0, count)."""
    from_env: str
    """``none`` (index and count as set), ``torchrun`` (RANK / WORLD_SIZE of torchrun or accelerate; rank 0
    merges after a barrier) or ``slurm`` (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN / SLURM_ARRAY_TASK_COUNT;
    merge afterwards with ``shard.merge=true``)."""
    merge: bool
    """Generate nothing: score the ``count`` finished parts and write the ordinary results and predictions."""
    barrier_timeout_s: int
    """``from_env=torchrun``: how long rank 0 waits at the barrier for the slowest shard before failing (the
    parts stay on disk; ``shard.merge=true`` then merges them)."""

    def __post_init__(self) -> None:
        check_choice(self.from_env, SHARD_SOURCES, "shard.from_env")
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(
                f"shard.index={self.index} must lie in [0, shard.count={self.count}) and shard.count must be "
                f">= 1; e.g. shard.count=2 with shard.index=0 and shard.index=1"
            )
        if self.from_env != "none" and (self.count, self.index) != (1, 0):
            raise ValueError(
                f"shard.from_env={self.from_env} takes the shard from the launcher's environment, but shard.count="
                f"{self.count} and shard.index={self.index} are set too; drop them, or set shard.from_env=none"
            )
        if self.merge and (self.count < 2 or self.from_env != "none"):
            raise ValueError(
                f"shard.merge=true with shard.count={self.count}, shard.from_env={self.from_env}: a merge reads "
                "the parts of an explicit count >= 2 (the one the shards ran with), e.g. shard.count=4 "
                "shard.merge=true"
            )
        if self.barrier_timeout_s < 1:
            raise ValueError(f"shard.barrier_timeout_s={self.barrier_timeout_s} must be >= 1")


AUTO = "auto"
"""``batch_size`` / ``queue_size`` value that ``sparsectx.eval.slots_budget`` resolves (``batch_auto``)."""


@dataclass
class BatchAutoConfig:
    """How ``batch_size: auto`` and ``queue_size: auto`` resolve (``batch_auto``; ``sparsectx.eval.slots_budget``)."""

    cpu_batch_size: int
    """The batch off CUDA (no memory check) and in ``mode=efficiency`` (which decodes one item at a time)."""
    queue_multiple: int
    """``queue_size: auto`` = this x ``batch_size``: rounds of the slots per engine call."""
    text_tokens: int
    """A prompt's text tokens besides its images, in the slot length the memory rule sizes for."""
    visual_tokens: int
    """An image's visual tokens in that length when ``model.max_visual_tokens`` is null."""
    free_fraction: float
    """Share of the GPU's free memory an engine call's estimate may fill."""

    def __post_init__(self) -> None:
        for key in ("cpu_batch_size", "queue_multiple", "text_tokens", "visual_tokens"):
            if getattr(self, key) < 1:
                raise ValueError(f"batch_auto.{key}={getattr(self, key)} must be a positive integer")
        if not 0.0 < self.free_fraction <= 1.0:
            raise ValueError(f"batch_auto.free_fraction={self.free_fraction} must lie in (0, 1]")


def on_cuda(device: str) -> bool:
    """Returns whether ``model.device`` names a CUDA device (``cuda``, ``cuda:1``): where ``auto`` measures memory."""
    return device.split(":", 1)[0] == "cuda"


def check_slot_count(value: int | str, key: str) -> None:
    """Raises ValueError naming ``key`` unless ``value`` is a positive int or ``auto``."""
    if value != AUTO and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{key}={value!r} must be a positive integer or {AUTO}")


def check_queue(batch_size: int, queue_size: int) -> None:
    """Raises ValueError unless ``queue_size`` is whole rounds of ``batch_size`` slots (issue 44: the queue a
    multiple of the slots), naming the nearest valid queue."""
    if queue_size < batch_size:
        raise ValueError(
            f"queue_size={queue_size} < batch_size={batch_size}: the engine's slots could never all be filled; "
            f"set queue_size to a multiple of batch_size (or queue_size={AUTO})"
        )
    if queue_size % batch_size:
        rounded = -(-queue_size // batch_size) * batch_size
        raise ValueError(
            f"queue_size={queue_size} is not a multiple of batch_size={batch_size}; set queue_size={rounded} "
            f"(or queue_size={AUTO}: batch_auto.queue_multiple x batch_size)"
        )


def check_failure_rate(value: float) -> None:
    """Raises ValueError naming ``max_failure_rate`` unless ``value`` lies in [0, 1]."""
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"max_failure_rate={value} must lie in [0, 1]")


def check_skip_fraction(value: float) -> None:
    """Raises ValueError naming ``max_skip_fraction`` unless ``value`` lies in [0, 1)."""
    if not 0.0 <= value < 1.0:
        raise ValueError(f"max_skip_fraction={value} must lie in [0, 1) (0 refuses any unusable row)")


TOP_LEVEL_CHECKS: dict[str, Callable[[Any], object]] = {
    "mode": lambda value: check_choice(value, MODES, "mode"),
    "budget": lambda value: check_budget(value, "budget"),
    "seed": lambda value: check_seed(value, "seed"),
    "batch_size": lambda value: check_slot_count(value, "batch_size"),
    "queue_size": lambda value: check_slot_count(value, "queue_size"),
    "max_failure_rate": check_failure_rate,
    "max_skip_fraction": check_skip_fraction,
}
"""The checks of ``EvalConfig``'s top-level values that need no other key, each by its field: ``__post_init__``
runs them first, and ``load_eval_config`` runs them beside the sections' checks, so their errors are reported
with those of the sections (which stop ``EvalConfig``'s own checks from running)."""


@dataclass
class EvalConfig:
    """The whole evaluation job (``conf/evaluate.yaml``)."""

    model: ModelConfig
    pruner: PrunerConfig
    bench: dict[str, BenchSpec]
    """Benchmarks to run, keyed by name (one ``conf/bench`` file, or a suite that includes several)."""
    logger: LoggerConfig
    prompt: PromptConfig
    decoding: DecodingConfig
    """Greedy evaluation's decoding (the cap is each benchmark's ``max_new_tokens``)."""
    passk: PasskConfig
    efficiency: EfficiencyConfig
    mode: str
    """``greedy`` (benchmark scores), ``passk`` (fixed-context Pass@K) or ``efficiency``."""
    budget: float
    """Kept fraction of each image's visual tokens, in (0, 1]; 1.0 keeps all (the pruner is not called)."""
    method: dict[str, Any]
    """The training method of the weights: ``{name: base}`` (untrained), or the ``conf/method`` preset chosen
    with ``method=<preset>`` (which also sets the budget and pruner the method trains at). ``name`` is the
    leaf's method component; the other fields are recorded, not used."""
    checkpoint: str | None
    """Trained checkpoint directory; replaces ``model.path`` when set."""
    experiment: str
    """Experiment name: first path component under ``results_root`` and the W&B group."""
    grid: Any
    """The study grid of an experiment preset (``conf/experiment``); the Snakefile reads it, evaluation does not."""
    results_root: str
    """Root of every results leaf."""
    seed: int
    """Root of every random choice (pruner masks, Pass@K draws, random weights)."""
    batch_size: int | str
    """Sequences the decode engine holds at once in greedy evaluation (its slots), or ``auto``: the rule of
    ``batch_auto`` (``sparsectx.eval.slots_budget``), resolved to an int before the run key is hashed."""
    queue_size: int | str
    """Items handed to the engine per call (encoded in ``batch_size`` groups), a multiple of ``batch_size``;
    finished slots are refilled from them, and their predictions are appended to disk when the call returns.
    ``auto``: ``batch_auto.queue_multiple`` x ``batch_size``."""
    batch_auto: BatchAutoConfig
    """How ``auto`` batch and queue sizes resolve; left out of the recorded config once they have."""
    engine: EngineConfig
    """The decode engine's settings (``conf/engine``)."""
    shard: ShardConfig
    """Data-parallel greedy evaluation: this process's share of each benchmark, or the merge of the shares."""
    force: bool
    """Recompute finished benchmarks and discard their cached predictions."""
    max_failure_rate: float
    """A benchmark whose share of generation errors plus empty extractions exceeds this fails the run. A prompt
    longer than the engine's cache (``engine.max_length``) is such an error row, with its reason."""
    max_skip_fraction: float
    """A benchmark file whose share of unusable rows (``sparsectx.data.read_tsv``'s skips, and rows the scorer
    could not score whatever the answer: ``sparsectx.eval.protocol.unscorable_rows``) exceeds this is refused;
    below it the rest is scored, the skips are recorded in the result and footnoted in tables."""

    def __post_init__(self) -> None:
        for key, check in TOP_LEVEL_CHECKS.items():
            check(getattr(self, key))
        if self.batch_size != AUTO:
            self.engine.check_slots(self.batch_size, "batch_size")
            if self.queue_size != AUTO:
                check_queue(self.batch_size, self.queue_size)
        self.engine.check_slots(self.passk.sample_batch, "passk.sample_batch")
        if self.decoding.do_sample:
            raise ValueError("decoding.do_sample=true: benchmark scores use greedy decoding; use mode=passk to sample")
        if not isinstance(self.method, dict) or not isinstance(self.method.get("name"), str):
            raise ValueError(f"method={self.method!r} needs a string 'name' (method.name=base for untrained weights)")
        if not self.bench:
            raise ValueError("bench is empty: pick a benchmark or suite, e.g. bench=synthetic")
        for key, spec in self.bench.items():
            if key != spec.name:
                raise ValueError(f"bench.{key}.name={spec.name!r} must equal its key {key!r} (the YAML stem)")
        sharded = self.shard.count > 1 or self.shard.from_env != "none"
        if sharded and self.mode != "greedy":
            raise ValueError(
                f"shard.count={self.shard.count}, shard.from_env={self.shard.from_env} with mode={self.mode}: "
                "only greedy evaluation is split over processes; set shard.count=1 shard.from_env=none"
            )
        if sharded and self.batch_size == AUTO and on_cuda(self.model.device):
            raise ValueError(
                f"batch_size={AUTO} on model.device={self.model.device} with shard.count={self.shard.count}, "
                f"shard.from_env={self.shard.from_env}: auto is sized from each GPU's free memory, but every shard "
                "and the merge (which measures no GPU) must use one batch, part of the results' key; set "
                "batch_size=<n> (a one-process run logs what auto resolves to)"
            )
        if self.mode == "efficiency" and self.efficiency.bench not in self.bench:
            raise ValueError(
                f"efficiency.bench={self.efficiency.bench!r} is not among the chosen benchmarks {sorted(self.bench)}"
            )

    @property
    def method_name(self) -> str:
        """Returns the method's name (``method.name``): the method component of every output path."""
        return self.method["name"]


def load_eval_config(cfg: DictConfig) -> EvalConfig:
    """Returns the composed config as a checked ``EvalConfig``; every unknown, missing, mistyped or refused key
    raises, all at once (``sparsectx.config_schema.load_config``), the top-level values checked beside the
    sections (``TOP_LEVEL_CHECKS``)."""
    values = top_level_values(cfg, list(TOP_LEVEL_CHECKS))
    checks = [partial(TOP_LEVEL_CHECKS[key], value) for key, value in values.items()]
    return load_config(EvalConfig, cfg, "the evaluation config (conf/evaluate.yaml)", checks=checks)


def top_level_values(cfg: DictConfig, keys: Sequence[str]) -> dict[str, Any]:
    """Returns {key: value as ``EvalConfig`` types it (``max_failure_rate=2`` as 2.0)} for each of ``keys`` of
    ``cfg``; a key left out of ``cfg``, or whose value does not merge into the schema, is left out (the schema's
    merge reports it). One merge of them all, then one per key only when that one fails."""
    schema = OmegaConf.structured(EvalConfig)
    present = [key for key in keys if key in cfg and not OmegaConf.is_missing(cfg, key)]
    try:
        merged = OmegaConf.merge(schema, OmegaConf.masked_copy(cfg, present))
        return {key: merged[key] for key in present}
    except CONFIG_ERRORS:
        values = {}
        for key in present:
            try:
                values[key] = OmegaConf.merge(schema, OmegaConf.masked_copy(cfg, [key]))[key]
            except CONFIG_ERRORS:
                continue
        return values


def compose_bench(name: str, overrides: Sequence[str] = ()) -> BenchSpec:
    """Returns ``conf/bench/<name>.yaml`` composed (its prompt parts included) and checked, with ``overrides``
    given as ``evaluate.py`` takes them (``bench.<name>.path=...``)."""
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
        cfg = compose("evaluate", overrides=[f"bench={name}", *overrides])
    return bench_spec_from(OmegaConf.to_container(cfg.bench[name], resolve=True))


def bench_spec_from(recorded: Mapping[str, Any]) -> BenchSpec:
    """Returns the ``BenchSpec`` of a benchmark config held as plain data (a result's recorded config).

    Raises:
        ValueError / omegaconf errors: the data does not read as a ``BenchSpec`` (naming the key; every key
            when several are wrong).
    """
    name = recorded.get("name", "?")
    return load_config(BenchSpec, OmegaConf.create(dict(recorded)), f"the recorded benchmark config of {name}")
