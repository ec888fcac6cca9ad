"""Load a VLM and its processor from a local directory, the shipped assets, or a hub id.

A hub id is read from the local Hugging Face cache at its pinned commit (``model.revision``; network only with
``model.local_files_only=false``): every file, weights and processor alike, comes from that one snapshot
folder, and ``snapshot_identity`` names what was read, so run keys change when the snapshot does.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText, PreTrainedModel

from sparsectx.checks import check_choice
from sparsectx.models.adapter import VLMAdapter
from sparsectx.models.compiled_blocks import COMPILE_BLOCKS, compile_blocks, compile_on
from sparsectx.models.families import FAMILIES, family_for
from sparsectx.models.processor import ImageTextProcessor, checkpoint_spec, load_processor
from sparsectx.models.vision_attention import use_grouped_vision_attention
from sparsectx.models.vision_mlp import align_vision_mlps

log = logging.getLogger(__name__)

PACKAGE_PREFIX = "package:"
ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
VISION_ATTENTION = ("grouped", "hf")
TILE_BUDGETS = ("pooled",)
HUB_COMMIT = re.compile(r"[0-9a-f]{40}")
"""A Hugging Face Hub commit: what ``model.revision`` pins and what a cache's ``snapshots/<commit>/`` names."""
FINGERPRINT_BYTES = 1 << 20
"""Bytes of each file a local folder's fingerprint reads (``snapshot_identity``): a safetensors file's header,
which lists every tensor, and the start of its data."""


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

    thinking: bool | None = None
    """Thinking mode, passed to the chat template as the family's switch (``enable_thinking`` for Qwen3.5 and
    GLM-4.6V; ``FamilySpec.thinking_switch``): null = the checkpoint template's own default; true/false on a
    family whose template has no switch is a config error. The effective value: ``LoadedModel.thinking``."""
    answer_prefix: str = ""
    """Text pre-filled after the generation prompt, after whatever the template opens there (its thinking block,
    open or closed empty): training and evaluation prompts end with it, generation continues from it, and the
    response read and scored is this text then the generated one (``ChatTemplating.response``); a reference
    response continues after it (``training.batches.reference_continuation``). LT-OPD's empty-thinking,
    open-answer prefix: ``model.thinking=false`` with ``model.answer_prefix='<answer>'``. "" = none."""
    max_visual_tokens: int | None = None
    """Cap on one image's post-merger visual tokens, applied by lowering the image processor's pixel bound
    (``longest_edge`` = tokens * (patch * merge)^2, times the temporal patch size for GLM): null = the
    checkpoint's own bound. SCOPD caps 1,280 in training and 4,096 in evaluation (its appendix;
    conf/model/scale/{train,evaluate}/qwen2_5_vl_7b.yaml). Refused on tiled families (LLaVA-OneVision)."""
    revision: str | None = None
    """The Hub commit (40 lowercase hex digits) a hub-id ``path`` is read at: weights, config and processor
    files all come from the cache's ``snapshots/<revision>/``. null = unpinned: the snapshot the cache's
    ``refs/main`` names, with a warning (the run keys still record the snapshot read). A local folder or a
    ``package:`` checkpoint ignores it."""
    local_files_only: bool = True
    """Read a hub id from the local Hugging Face cache only (``HF_HUB_CACHE``), never the network: a missing
    snapshot is an error naming the download command. false lets ``huggingface_hub`` download the snapshot."""

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
        if self.max_visual_tokens is not None and self.max_visual_tokens < 1:
            raise ValueError(
                f"model.max_visual_tokens={self.max_visual_tokens} must be a positive integer or null (no cap)"
            )
        if self.image_workers < 1:
            raise ValueError(f"model.image_workers={self.image_workers} must be a positive integer (1 = no threads)")
        if self.revision is not None and not HUB_COMMIT.fullmatch(str(self.revision)):
            raise ValueError(
                f"model.revision={self.revision!r} is not a commit: pin the 40 lowercase hex digits of the "
                f"checkpoint's Hub commit (its 'Files and versions' history, or the snapshots/<commit> folder "
                f"`hf download {self.path}` fills), or set model.revision=null to read whatever the cache's "
                "refs/main names (unpinned)"
            )


@dataclass
class LoadedModel:
    """A model ready for sparse-context use: its adapter and processor."""

    adapter: VLMAdapter
    processor: ImageTextProcessor

    @property
    def thinking(self) -> bool | None:
        """The effective thinking setting (``model.thinking``, else the template's default; None when the
        family's template has no switch); record it with results."""
        return self.processor.thinking

    @property
    def generation_prefix(self) -> str:
        """What the generation prompt opens after the assistant header (``templates.generation_prefix``)."""
        return self.processor.generation_prefix

    @property
    def answer_prefix(self) -> str:
        """The text pre-filled after the generation prompt (``model.answer_prefix``); record it with results."""
        return self.processor.answer_prefix


def check_device(device: str) -> None:
    """Returns None; raises ValueError naming ``model.device`` when the device string is not usable here."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"model.device={device!r} is not a torch device ({err}); use cpu, cuda or cuda:<n>") from err
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


def resolve_model_path(path: str, revision: str | None = None, local_files_only: bool = True) -> str:
    """Returns the local folder of ``path``: a shipped checkpoint (``package:<dir>``), a local folder, or the
    Hugging Face cache's snapshot of a hub id at ``revision`` (``hub_snapshot``).

    Raises:
        FileNotFoundError: a local-looking path holds no ``config.json``, or a hub id's snapshot is not at hand,
            naming the setting or the download command.
    """
    if is_hub_id(path):
        return hub_snapshot(path, revision, local_files_only)
    shipped = path.startswith(PACKAGE_PREFIX)
    local = ASSETS_DIR / path.removeprefix(PACKAGE_PREFIX) if shipped else Path(path).expanduser()
    if not (local / "config.json").is_file():
        raise FileNotFoundError(
            f"model.path={path!r}: no checkpoint at {local} (expected a directory with config.json). "
            "Point model.path at a local checkpoint directory, e.g. model.path=/models/Qwen2.5-VL-7B-Instruct, "
            "or rebuild the shipped tiny model with `python src/pretrain_tiny.py`."
        )
    return str(local)


def is_hub_id(path: str) -> bool:
    """Returns whether ``model.path`` names a hub id: neither ``package:<dir>`` nor a local-looking or existing
    path."""
    return not path.startswith((PACKAGE_PREFIX, "/", ".", "~")) and not Path(path).exists()


def hub_snapshot(repo_id: str, revision: str | None, local_files_only: bool) -> str:
    """Returns the cache folder (``<HF_HUB_CACHE>/models--Org--Name/snapshots/<commit>``) of hub id ``repo_id``
    at ``revision`` (None: the commit ``refs/main`` names), downloading it only when ``local_files_only`` is
    false.

    Raises:
        FileNotFoundError: the snapshot is not in the cache (or could not be downloaded), naming the cache, the
            download command with the pinned revision and the settings that change where it is read from.
    """
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HFValidationError

    try:
        return snapshot_download(repo_id, revision=revision, local_files_only=local_files_only)
    except (OSError, HFValidationError) as err:  # not cached, incomplete, offline, unknown repo or revision
        pin = f" --revision {revision}" if revision else ""
        at = f"at model.revision={revision}" if revision else "at refs/main (model.revision=null: unpinned)"
        where = (
            f"is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}), and model.local_files_only=true "
            "reads nothing else"
            if local_files_only
            else "could not be downloaded"
        )
        raise FileNotFoundError(
            f"model.path={repo_id!r} {at} {where} ({type(err).__name__}). Download it where "
            f"the Hub is reachable with `hf download {repo_id}{pin}` (huggingface-cli download on older "
            "huggingface_hub) into that cache (HF_HUB_CACHE), or set model.local_files_only=false to let this "
            "run download it, or set model.path=/local/dir (a checkpoint folder with config.json); if "
            f"{repo_id!r} was meant as a local folder, no folder is there."
        ) from err


_WARNED_UNPINNED: set[str] = set()
"""The unpinned snapshot folders already warned about in this process (one warning per folder)."""


def resolve_checkpoint(cfg: ModelConfig) -> str:
    """Returns the local folder of ``cfg``'s checkpoint: ``model.path`` at ``model.revision``, read as
    ``model.local_files_only`` says (``resolve_model_path``).

    A hub id without a revision is read at the commit the cache's ``refs/main`` names, with a warning: an
    upstream update moves it, and the run keys record the snapshot read (``snapshot_identity``).
    """
    source = resolve_model_path(cfg.path, cfg.revision, cfg.local_files_only)
    if cfg.revision is None and is_hub_id(cfg.path) and source not in _WARNED_UNPINNED:
        _WARNED_UNPINNED.add(source)
        log.warning(
            "model.path=%s is unpinned (model.revision=null): read at the snapshot the cache's refs/main names, "
            "%s, which an upstream update moves; the run keys record it, so another snapshot is computed again, "
            "never reused. Pin it with model.revision=%s",
            cfg.path,
            snapshot_identity(source),
            hub_commit(source),
        )
    return source


def hub_commit(folder: str | Path) -> str | None:
    """Returns the commit of a Hugging Face cache snapshot folder (``models--Org--Name/snapshots/<commit>``),
    None for any other folder."""
    folder = Path(folder)
    snapshots = folder.parent
    in_cache = snapshots.name == "snapshots" and snapshots.parent.name.startswith("models--")
    return folder.name if in_cache and HUB_COMMIT.fullmatch(folder.name) else None


def snapshot_identity(folder: str | Path) -> str:
    """Returns what identifies the checkpoint in ``folder`` for run keys: ``Org/Name@<commit>`` for a Hugging
    Face cache snapshot, else a fingerprint of its content.

    The Hub commit names every file of the snapshot exactly and costs nothing to read. Any other folder gets
    sha256 (first 16 hex digits) over each file's relative name, size and first MiB: cheap on multi-GB weights
    and the same for a copy elsewhere. Small records enter it whole: a trained checkpoint's
    ``sparsectx_training.json`` (every weight file's sha256, checked when it loads) and an ``hf download
    --local-dir`` folder's ``.cache/`` (its commit and etags). Foreign weights re-saved in place with equal sizes
    and an equal first MiB would go unseen.
    """
    folder = Path(folder)
    commit = hub_commit(folder)
    if commit is not None:
        return f"{folder.parent.parent.name.removeprefix('models--').replace('--', '/', 1)}@{commit}"
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder)}:{path.stat().st_size}:".encode())
        with open(path, "rb") as handle:
            digest.update(handle.read(FINGERPRINT_BYTES))
    return digest.hexdigest()[:16]


def adapter_for(model: PreTrainedModel, signal_chunk: int) -> VLMAdapter:
    """Returns the family adapter for an already-built HF model; unknown families raise with the supported list."""
    return family_for(model.config.model_type).adapter(model, signal_chunk)


def check_family(model_type: str) -> None:
    """Returns None if ``model_type`` has a family; raises KeyError naming the supported model_types."""
    family_for(model_type)


def check_family_options(cfg: ModelConfig, family: str) -> None:
    """Returns None if ``cfg``'s family-specific options suit ``family`` (a family name or an accepted
    model_type); raises ValueError naming the key."""
    spec = FAMILIES.by_name(family) if family in FAMILIES.names() else family_for(family)
    tiled = [s.name for s in FAMILIES if s.tiled]
    if cfg.tile_budget is not None and not spec.tiled:
        raise ValueError(
            f"model.tile_budget={cfg.tile_budget!r} applies to tiled families ({', '.join(tiled)}), "
            f"not to {family!r} checkpoints; remove model.tile_budget (set it to null)"
        )
    if cfg.tile_budget is None and spec.tiled:
        raise ValueError(f"model.tile_budget is null but {family!r} tiles its images; set model.tile_budget=pooled")


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
    """Returns the model (eval mode, on ``cfg.device``) and its processor, loaded through the Auto classes from
    the one local folder ``resolve_checkpoint`` names (a hub id's pinned snapshot)."""
    check_device(cfg.device)
    source = resolve_checkpoint(cfg)
    try:
        spec = checkpoint_spec(source)
        check_family_options(cfg, spec.name)
        processor = load_processor(source, cfg.image_workers, cfg.max_visual_tokens, cfg.thinking, cfg.answer_prefix)
        model = AutoModelForImageTextToText.from_pretrained(
            source, dtype=DTYPES[cfg.dtype], attn_implementation=cfg.attn_implementation
        )
    except OSError as err:
        raise OSError(
            f"could not load model.path={cfg.path!r} from {source} ({err}). The folder lacks a file the model "
            "needs: download the checkpoint again, or set model.path=/local/dir (a directory with config.json "
            "and weights)."
        ) from err
    model.to(cfg.device).eval()
    route_vision_tower(model, cfg)
    return LoadedModel(adapter=adapter_for(model, cfg.signal_chunk), processor=processor)
