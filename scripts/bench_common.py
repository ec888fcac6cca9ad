"""What the benchmark scripts share: the real architectures (random weights), timing, and counting what a call
generated (every rate is counted tokens over the time of the same run).

Each architecture is its checkpoint's published ``config.json``, the file the project keeps beside the model
preset that names it (``sparsectx.models.published``), so a benchmark builds the real architecture with no hub
access; cost does not depend on weight values. ``--config DIR`` in each script reads a local ``config.json``
instead.
"""

from __future__ import annotations

import gc
import io
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
import transformers
from omegaconf import OmegaConf
from PIL import Image
from transformers import AutoConfig, AutoModelForImageTextToText, PretrainedConfig

from sparsectx.data import Item
from sparsectx.generation import Generation
from sparsectx.models import LoadedModel, adapter_for, resolve_model_path
from sparsectx.models.compiled_blocks import compile_blocks, compile_on
from sparsectx.models.families import FAMILIES
from sparsectx.models.loading import set_vision_attention
from sparsectx.models.processor import ImageTextProcessor, load_processor
from sparsectx.models.published import MODEL_CONF_DIR, model_hub_id, published_config, published_folder
from sparsectx.models.vision_mlp import align_vision_mlps

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def published_presets() -> tuple[str, ...]:
    """Returns the model presets (``conf/model/<arch>.yaml``) a benchmark builds: those whose checkpoint's
    published files the project keeps (``sparsectx.models.published``) and whose family packs each image into
    one patch grid (not tiled: the noise images' side is set in patches and merge units)."""
    presets = []
    for preset in sorted(MODEL_CONF_DIR.glob("*.yaml")):
        try:
            published = published_config(model_hub_id(preset.stem))
        except FileNotFoundError:  # a package checkpoint, or one whose published files are not kept
            continue
        if not FAMILIES.for_config(published, preset.stem).tiled:
            presets.append(preset.stem)
    return tuple(presets)


ARCHITECTURES = published_presets()
"""The ``--arch`` choices."""


def visual_tokens(arch: str) -> dict[str, str]:
    """Returns config key -> token of the visual special tokens of ``arch``'s published ``config.json`` (its
    top-level ``image_*``, ``video_*`` and ``vision_*`` token ids), each id read as its token through the family
    record's ``special_tokens``."""
    published = published_config(model_hub_id(arch))
    spec = FAMILIES.for_config(published, arch)
    return {
        key: spec.special_tokens[value]
        for key, value in published.items()
        if key.startswith(("image_", "video_", "vision_")) and key.endswith("_token_id")
    }


def architecture(config_dir: str | None, arch: str = "qwen2_5_vl_7b", tokenizer=None) -> PretrainedConfig:
    """Returns the config of ``arch``'s checkpoint as published (``sparsectx/assets/published/<checkpoint>/
    config.json``, read by transformers' ``AutoConfig``), or the one in ``config_dir``'s config.json.

    With ``tokenizer`` (the prompts' tokenizer, for benchmarks that run the project's prompts), the visual token
    ids (``visual_tokens``) and the decoder's eos and pad ids are that tokenizer's, so its prompts place image
    tokens where the model looks for them.
    """
    folder = Path(config_dir) if config_dir is not None else published_folder(model_hub_id(arch))
    config = AutoConfig.from_pretrained(folder)
    if tokenizer is not None:
        for key, token in visual_tokens(arch).items():
            setattr(config, key, tokenizer.convert_tokens_to_ids(token))
        text = config.get_text_config()
        text.eos_token_id, text.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    return config


def bench_processor(arch: str, workers: int, scratch: Path) -> ImageTextProcessor:
    """Returns a processor whose tokenizer holds the family's image marker: the shipped tiny model's for the Qwen
    families; otherwise the tests' character tokenizer with GLM's special tokens and chat template and GLM's own
    image processor (``tests/family_models.py``), saved in ``scratch`` beside ``arch``'s config.json, from which
    the processor reads its family (a folder without one would be read as the tiny model's family).

    Raises:
        SystemExit: neither tokenizer holds the family's image marker (naming ``--arch``).
    """
    marker = FAMILIES.for_config(published_config(model_hub_id(arch)), arch).image_marker
    tiny = load_processor(resolve_model_path("package:tiny-vlm"), workers)
    if marker in tiny.tokenizer.get_vocab():
        return tiny
    sys.path.insert(0, str(ROOT / "tests"))
    from family_models import glm_processor_dir

    tokenizer = glm_processor_dir(scratch)
    if marker not in tokenizer.get_vocab():
        raise SystemExit(f"--arch {arch}: no prompt tokenizer here holds the family's image marker {marker}")
    architecture(None, arch, tokenizer).save_pretrained(scratch)
    return load_processor(scratch, workers)


def real_model(
    arch: str, config_dir: str | None, visual_tokens: int, compile_mode: str | None, scratch: Path
) -> tuple[LoadedModel, int]:
    """Returns the real architecture with random bf16 weights on CUDA, as the model preset configures it
    (grouped vision attention, padded vision MLP, compiled blocks), and the square image side in pixels that
    gives ``visual_tokens`` merged tokens."""
    preset = OmegaConf.load(ROOT / "conf/model" / f"{arch}.yaml")
    processor = bench_processor(arch, preset.image_workers, scratch)
    config = architecture(config_dir, arch, processor.tokenizer)
    family = FAMILIES.for_model_type(config.model_type)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    vision = model.config.vision_config
    side = vision.patch_size * vision.spatial_merge_size * round(visual_tokens**0.5)
    image_processor = processor.image_processor
    image_processor.patch_size = vision.patch_size
    # A family whose resize bounds count both temporal copies of an image (GLM's smart_resize: t x h x w).
    pixels = side * side * (vision.temporal_patch_size if family.temporal_in_pixel_bounds else 1)
    image_processor.size = {"shortest_edge": pixels, "longest_edge": pixels}
    model.eval()
    set_vision_attention(model, "grouped")
    align_vision_mlps(model, preset.vision_mlp_multiple)
    compile_blocks(model, compile_on(compile_mode or preset.compile_blocks, model.device))
    return LoadedModel(adapter_for(model, signal_chunk=preset.signal_chunk), processor), side


def noise_items(count: int, side: int, seed: int) -> list[Item]:
    """Returns ``count`` training items with random ``side`` x ``side`` images and a short reference trace."""
    generator = torch.Generator().manual_seed(seed)
    items = []
    for index in range(count):
        pixels = torch.randint(0, 256, (side, side, 3), generator=generator, dtype=torch.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels.numpy()).save(buffer, format="PNG")
        items.append(
            Item(
                index,
                buffer.getvalue(),
                "How many circles are in the image?",
                {},
                "3",
                "",
                "count",
                "",
                "<think>I count three circles.</think><answer>3</answer>",
                "",
                {},
            )
        )
    return items


def timed_runs(fn: Callable[[], object], device: torch.device, warmup: int, repeats: int) -> list[tuple[float, object]]:
    """Returns (wall seconds, what ``fn`` returned) of ``repeats`` runs after ``warmup`` untimed ones (synced), so a
    rate is the tokens of a run over that same run's time."""
    runs = []
    for index in range(warmup + repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        result = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if index >= warmup:
            runs.append((time.perf_counter() - start, result))
    return runs


def median_run(runs: list[tuple[float, object]]) -> tuple[float, object]:
    """Returns the run of median time (the slower middle one of an even count) and what it returned."""
    return sorted(runs, key=lambda run: run[0])[len(runs) // 2]


@dataclass
class GeneratedLengths:
    """The tokens each sequence of one call generated, counted from the sequences the call returned."""

    lengths: list[int]

    @property
    def tokens(self) -> int:
        """Returns the tokens generated over every sequence."""
        return sum(self.lengths)

    def summary(self) -> dict[str, float]:
        """Returns min / median / p90 (nearest rank) / max tokens per sequence: what shows an early stop."""
        ordered = sorted(self.lengths)
        if not ordered:
            return {}
        p90 = ordered[math.ceil(0.9 * len(ordered)) - 1]
        return {"min": ordered[0], "median": statistics.median(ordered), "p90": p90, "max": ordered[-1]}

    def text(self) -> str:
        """Returns the summary as one table cell, ``min / median / p90 / max``."""
        summary = self.summary()
        return " / ".join(f"{summary[key]:g}" for key in ("min", "median", "p90", "max")) if summary else "none"


def engine_lengths(generations: Sequence[Generation]) -> GeneratedLengths:
    """Returns the lengths of the engine's returned generations (each ends at its end token or stop string,
    which it keeps, or at the cap: ``sparsectx.engine.decode``)."""
    return GeneratedLengths([generation.token_ids.numel() for generation in generations])


def hf_lengths(sequences: torch.Tensor, prompt_length: int, end_ids: Collection[int]) -> list[int]:
    """Returns the tokens each row of HF ``generate``'s (B, prompt + T) output generated after its prompt.

    A row that emitted one of ``end_ids`` (the eos ids ``generate`` was given) ends there, the end id counted:
    transformers 5.17 ``GenerationMixin._sample`` (generation/utils.py) writes ``pad_token_id`` into a finished
    row for the steps the batch still runs. Without ``end_ids`` every one of the T columns was generated.
    """
    new = sequences[:, prompt_length:]
    if not end_ids:
        return [new.shape[1]] * new.shape[0]
    ends = torch.isin(new, torch.tensor(sorted(end_ids), device=new.device))
    first = torch.where(ends.any(dim=1), ends.int().argmax(dim=1) + 1, new.shape[1])
    return first.tolist()


def tokens_per_second(tokens: int, seconds: float) -> float | None:
    """Returns the rate of ``tokens`` generated in ``seconds``; None when nothing was generated."""
    return tokens / seconds if tokens > 0 else None


def rate_text(tokens: int, seconds: float) -> str:
    """Returns the tokens/s cell: the rate, or a note that the call generated no tokens (no rate to print)."""
    rate = tokens_per_second(tokens, seconds)
    return "no tokens generated" if rate is None else f"{rate:.0f}"


def run_facts(device: torch.device) -> dict[str, object]:
    """Returns what a ``--json`` record says about where it ran: device, library versions, commit (and whether
    tracked files differed from it), command."""
    git = lambda *args: subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)  # noqa: E731
    try:
        commit = git("rev-parse", "HEAD").stdout.strip()
        dirty = bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())
    except (OSError, subprocess.CalledProcessError):  # a copy of the tree without its git directory
        commit, dirty = None, None
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "commit": commit,
        "commit_dirty": dirty,
        "command": " ".join(sys.argv),
    }


def unless_out_of_memory(measure: Callable[[], T]) -> tuple[T | None, str | None]:
    """Returns (``measure()``, None), or (None, the allocator's message) when the GPU ran out of memory
    (``torch.cuda.OutOfMemoryError``): the caller prints ``OOM`` for that cell and goes on with the memory freed,
    so ``measure`` should hold what it allocates (an engine, its caches) in its own frame."""
    try:
        return measure(), None
    except torch.cuda.OutOfMemoryError as error:
        message = str(error).splitlines()[0]
    gc.collect()  # outside the except block: the error's traceback no longer holds the failed call's tensors
    torch.cuda.empty_cache()
    return None, message


def write_json(path: Path, record: dict) -> None:
    """Writes ``record`` to ``path`` whole (a temporary file, then renamed), so a run cut off mid-way leaves the
    rows finished so far, never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(record, indent=1) + "\n")
    partial.replace(path)
