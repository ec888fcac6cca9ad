"""Load a VLM and its processor from a local directory, the shipped assets, or a hub id."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText, PreTrainedModel

from sparsectx.checks import check_choice
from sparsectx.models import glm46v, qwen2_5_vl, qwen3_vl
from sparsectx.models.adapter import VLMAdapter
from sparsectx.models.compiled_blocks import COMPILE_BLOCKS, compile_blocks, compile_on
from sparsectx.models.llava_onevision import LlavaOnevisionAdapter
from sparsectx.models.processor import ImageTextProcessor, checkpoint_family, load_processor
from sparsectx.models.qwen3_5 import Qwen35Adapter
from sparsectx.models.qwen_common import QwenVLAdapter, VisionLayout
from sparsectx.models.vision_attention import use_grouped_vision_attention
from sparsectx.models.vision_mlp import align_vision_mlps

PACKAGE_PREFIX = "package:"
ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"

LAYOUTS: dict[str, VisionLayout] = {
    "qwen2_5_vl": qwen2_5_vl.LAYOUT,
    "qwen3_vl": qwen3_vl.LAYOUT,
    "glm46v": glm46v.LAYOUT,
}
ADAPTERS: dict[str, Callable[[PreTrainedModel, int], VLMAdapter]] = {
    "qwen3_5": Qwen35Adapter,
    "llava_onevision": LlavaOnevisionAdapter,
}
"""Families whose adapter is its own class (model, signal_chunk) rather than ``QwenVLAdapter`` with a layout."""
NOT_YET = {
    "llavaonevision1_5": "LLaVA-OneVision-1.5 has no class in transformers 5.17, only remote code; "
    "conf/model/llava_onevision_qwen2_7b.yaml is the llava_onevision stand-in",
}
"""Known checkpoint families without an adapter, with the reason."""
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
VISION_ATTENTION = ("grouped", "hf")
TILE_BUDGETS = ("pooled",)
TILED_FAMILIES = ("llava_onevision",)
"""Families whose images are any-resolution tiles plus a base view (``model.tile_budget`` applies)."""


@dataclass
class ModelConfig:
    """The ``model`` config group (``conf/model/*.yaml``)."""

    name: str
    """Short name used in result paths (e.g. ``tiny``, ``qwen2_5_vl_7b``)."""
    path: str
    """Local directory, ``package:<dir>`` for a checkpoint shipped in ``sparsectx/assets``, or a hub id."""
    dtype: str
    """Weights and compute dtype: float32, bfloat16 or float16."""
    device: str
    """torch device string: ``cpu``, ``cuda``, ``cuda:1`` ..."""
    attn_implementation: str
    """transformers attention backend: sdpa, eager or flash_attention_2."""
    signal_chunk: int
    """Query rows whose explicit softmax is held at once when computing the pruner signals."""
    vision_attention: str
    """Vision tower attention: ``grouped`` runs one sdpa call per distinct window/image length and takes the
    pruner signals from the signal block's own attention (``sparsectx.models.vision_attention``), whatever
    ``attn_implementation`` says; ``hf`` keeps HF's backend for the tower too (under sdpa/eager, one call
    per window or image, signals recomputed in a second pass)."""
    image_workers: int
    """Threads that preprocess a batch's images in parallel (resize, rescale, normalise, patchify); the
    output is identical to one sequential call. At 1296 tokens an image costs ~0.1 s of CPU, so a batch of
    32 on one thread outlasts its whole vision tower on the GPU."""
    vision_mlp_multiple: int
    """Pads the vision MLP's intermediate width with zeros to a multiple of this at inference (the same
    outputs; ``sparsectx.models.vision_mlp``): Qwen2.5-VL's 3,420 misses cuBLAS's fast kernels. 0 = off."""
    compile_blocks: str
    """``torch.compile`` the vision blocks and decoder layers in forwards that train none of their weights
    (``sparsectx.models.compiled_blocks``): ``auto`` (on CUDA), ``on`` or ``off``."""
    tile_budget: str | None = None
    """LLaVA-OneVision only (null elsewhere): how an image's k splits over its base view and tiles.
    ``pooled``, the one split implemented: k = round(b * N) over the whole packed run (base view, tiles,
    newlines) and the pruner's scores alone choose where the kept tokens fall
    (``sparsectx.models.llava_onevision``)."""

    def __post_init__(self) -> None:
        check_choice(self.dtype, sorted(DTYPES), "model.dtype")
        check_choice(self.vision_attention, VISION_ATTENTION, "model.vision_attention")
        check_choice(self.compile_blocks, COMPILE_BLOCKS, "model.compile_blocks")
        if self.signal_chunk < 1:
            raise ValueError(f"model.signal_chunk={self.signal_chunk} must be a positive integer")
        if self.vision_mlp_multiple < 0:
            raise ValueError(
                f"model.vision_mlp_multiple={self.vision_mlp_multiple} must be 0 (off) or a positive integer"
            )
        if self.tile_budget is not None:
            check_choice(self.tile_budget, TILE_BUDGETS, "model.tile_budget")
        if self.image_workers < 1:
            raise ValueError(
                f"model.image_workers={self.image_workers} must be a positive integer (1 = no threads)"
            )


@dataclass
class LoadedModel:
    """A model ready for sparse-context use: its adapter and processor."""

    adapter: VLMAdapter
    processor: ImageTextProcessor


def check_device(device: str) -> None:
    """Returns None; raises ValueError naming ``model.device`` when the device string is not usable here."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(
            f"model.device={device!r} is not a torch device ({err}); use cpu, cuda or cuda:<n>"
        ) from err
    if parsed.type != "cuda":
        return
    if not torch.cuda.is_available():
        raise ValueError(
            f"model.device={device!r} but CUDA is not available here (torch {torch.__version__}, "
            f"CUDA build {torch.version.cuda}); run on a GPU machine or set model.device=cpu"
        )
    if parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise ValueError(
            f"model.device={device!r} but this machine has {torch.cuda.device_count()} CUDA device(s); "
            f"set model.device=cuda:<0..{torch.cuda.device_count() - 1}>"
        )


def resolve_model_path(path: str) -> str:
    """Returns a local directory or hub id for ``path``; raises if a local-looking path is missing."""
    if path.startswith(PACKAGE_PREFIX):
        local = ASSETS_DIR / path[len(PACKAGE_PREFIX) :]
    elif path.startswith(("/", ".", "~")) or Path(path).exists():
        local = Path(path).expanduser()
    else:
        return path
    if not (local / "config.json").is_file():
        raise FileNotFoundError(
            f"model.path={path!r}: no checkpoint at {local} (expected a directory with config.json). "
            "Point model.path at a local checkpoint directory, e.g. model.path=/models/Qwen2.5-VL-7B-Instruct, "
            "or rebuild the shipped tiny model with `python src/pretrain_tiny.py`."
        )
    return str(local)


def adapter_for(model: PreTrainedModel, signal_chunk: int) -> VLMAdapter:
    """Returns the family adapter for an already-built HF model; unknown families raise with the supported list."""
    family = model.config.model_type
    check_family(family)
    if family in ADAPTERS:
        return ADAPTERS[family](model, signal_chunk)
    return QwenVLAdapter(family, model, LAYOUTS[family], signal_chunk)


def check_family(family: str) -> None:
    """Returns None if ``family`` (a ``model_type``) has an adapter; raises KeyError naming the supported ones."""
    if family not in LAYOUTS and family not in ADAPTERS:
        supported = ", ".join(sorted({*LAYOUTS, *ADAPTERS}))
        reason = f" ({NOT_YET[family]})" if family in NOT_YET else ""
        raise KeyError(f"model family {family!r} has no adapter{reason}; supported: {supported}")


def check_family_options(cfg: ModelConfig, family: str) -> None:
    """Returns None if ``cfg``'s family-specific options suit ``family``; raises ValueError naming the key."""
    tiled = family in TILED_FAMILIES
    if cfg.tile_budget is not None and not tiled:
        raise ValueError(
            f"model.tile_budget={cfg.tile_budget!r} applies to tiled families ({', '.join(TILED_FAMILIES)}), "
            f"not to {family!r} checkpoints; remove model.tile_budget (set it to null)"
        )
    if cfg.tile_budget is None and tiled:
        raise ValueError(
            f"model.tile_budget is null but {family!r} tiles its images; set model.tile_budget=pooled"
        )


def set_vision_attention(model: PreTrainedModel, choice: str) -> None:
    """Returns None after routing ``model``'s vision tower as ``model.vision_attention`` (``choice``) says.

    Only packed towers (``model.model.visual``, one cu_seqlens sequence) are routed: LLaVA-OneVision's SigLIP
    runs its equal-size views as one batch under HF's backend whatever the choice.
    """
    check_choice(choice, VISION_ATTENTION, "model.vision_attention")
    if choice == "grouped" and getattr(model.model, "visual", None) is not None:
        use_grouped_vision_attention(model)


def route_vision_tower(model: PreTrainedModel, cfg: ModelConfig) -> None:
    """Returns None after choosing the vision tower's attention and MLP paths and the compiled blocks as
    ``cfg`` says."""
    set_vision_attention(model, cfg.vision_attention)
    align_vision_mlps(model, cfg.vision_mlp_multiple)
    compile_blocks(model, compile_on(cfg.compile_blocks, model.device))


def load_model(cfg: ModelConfig) -> LoadedModel:
    """Returns the model (eval mode, on ``cfg.device``) and its processor, loaded through the Auto classes."""
    check_device(cfg.device)
    source = resolve_model_path(cfg.path)
    try:
        family = checkpoint_family(source)
        check_family(family)
        check_family_options(cfg, family)
        processor = load_processor(source, cfg.image_workers)
        model = AutoModelForImageTextToText.from_pretrained(
            source, dtype=DTYPES[cfg.dtype], attn_implementation=cfg.attn_implementation
        )
    except OSError as err:
        raise OSError(
            f"could not load model.path={cfg.path!r} ({err}). Without network access, download the checkpoint "
            "elsewhere and set model.path=/local/dir (a directory with config.json and weights)."
        ) from err
    model.to(cfg.device).eval()
    route_vision_tower(model, cfg)
    return LoadedModel(adapter=adapter_for(model, cfg.signal_chunk), processor=processor)
