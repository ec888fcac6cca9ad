"""Schema of ``conf/pretrain_tiny.yaml``: the tiny architecture and the pretraining schedule."""

from __future__ import annotations

from dataclasses import dataclass

from sparsectx.data.config import SuiteConfig
from sparsectx.data.video_family import VideoFamilyConfig


@dataclass
class VisionArch:
    """Qwen2.5-VL vision tower dimensions."""

    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    patch_size: int
    spatial_merge_size: int
    temporal_patch_size: int
    window_size: int
    """Window side in pixels; the image side makes one window cover the image (no per-window Python loop)."""
    fullatt_block_indexes: list[int]


@dataclass
class TextArch:
    """Qwen2.5-VL language-model dimensions."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    rope_theta: float
    mrope_section: list[int]
    """Rotary frequency split over (t, h, w); sums to head_dim / 2."""


@dataclass
class PretrainSchedule:
    """Optimisation and bookkeeping."""

    steps: int
    batch_size: int
    lr: float
    warmup_steps: int
    weight_decay: float
    grad_clip: float
    bf16: bool
    batched_vision_attention: bool
    """Fold the vision tower's equal-size images into one attention call instead of HF's per-image loop."""
    num_workers: int
    main_threads: int
    """Intra-op CPU threads of the training process: left at the core count, they fight the data workers
    for cores and stall the Python that launches GPU kernels."""
    log_every: int
    save_every: int
    time_limit_s: float
    """Save and exit after this many seconds (resume by re-running): splits a long run into short calls."""
    videos_per_batch: int
    """How many items of every batch are clips of the ``video`` family (they lead the batch); 0 = images only."""


@dataclass
class PretrainConfig:
    """The whole pretraining job."""

    data: SuiteConfig
    seed: int
    device: str
    out_dir: str
    """The processor folder written by build_data; the model weights and card are added to it."""
    state_dir: str
    """Resume state (weights, optimizer, step, curve) written atomically every save_every steps."""
    init_from: str | None
    """A released tiny-model folder to start from when no resume state exists (a second training stage);
    None = random initialisation from ``seed``."""
    weights_dtype: str
    """dtype of the shipped safetensors (bfloat16 keeps the file under 15 MiB)."""
    vision: VisionArch
    text: TextArch
    train: PretrainSchedule
    video: VideoFamilyConfig | None = None
    """The synthetic video family clips are drawn from (``data/video=<name>``); None = images only."""

    def __post_init__(self) -> None:
        if self.seed is None or isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed={self.seed!r} must be an int")
        head_dim = self.text.hidden_size // self.text.num_attention_heads
        if sum(self.text.mrope_section) * 2 != head_dim:
            raise ValueError(f"text.mrope_section={self.text.mrope_section} must sum to head_dim/2={head_dim // 2}")
        if self.train.steps < 1 or self.train.batch_size < 1:
            raise ValueError("train.steps and train.batch_size must be >= 1")
        per_batch = self.train.videos_per_batch
        if not 0 <= per_batch <= self.train.batch_size:
            raise ValueError(
                f"train.videos_per_batch={per_batch} must lie in [0, train.batch_size={self.train.batch_size}]"
            )
        if (per_batch > 0) != (self.video is not None):
            raise ValueError(
                f"train.videos_per_batch={per_batch} with video={'set' if self.video else 'null'}: clips need both "
                "a video family (data/video=tiny_video) and train.videos_per_batch > 0"
            )
        if self.video is not None and self.video.frames % self.vision.temporal_patch_size:
            raise ValueError(
                f"video.frames={self.video.frames} must be a multiple of vision.temporal_patch_size="
                f"{self.vision.temporal_patch_size} (pretraining draws whole temporal patches)"
            )
