"""Typed schema of the ``data`` config group (``conf/data/*.yaml``) and of the media limits
(``conf/data/media/limits.yaml``), checked when the config is loaded.

Every field is required here: the YAML is the single source of values (no defaults in code).
``load_suite_config`` merges a composed ``DictConfig`` into this schema, so an unknown or missing key
is an error that names the key.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf
from PIL import Image

from sparsectx.checks import check_choice
from sparsectx.config_schema import load_config
from sparsectx.paths import CONF_DIR

# Families that teach (dense description) but must never be scored: a benchmark may not use them.
TRAIN_ONLY_FAMILIES = frozenset({"describe"})


def check_range(value: list[int], key: str, low: int) -> None:
    """Returns None; raises ValueError unless ``value`` is ``[min, max]`` with ``low <= min <= max``."""
    if len(value) != 2 or not low <= value[0] <= value[1]:
        raise ValueError(f"{key}={list(value)!r} must be [min, max] with {low} <= min <= max")


@dataclass
class SceneConfig:
    image_size: int
    """Side of the square RGB image in pixels (448 = 32x32 patches of 14 = 256 merged tokens)."""
    background: list[int]
    """RGB of the plain background."""
    colors: dict[str, list[int]]
    """Colour name -> RGB; the names are the colour vocabulary of questions and answers."""
    shapes: list[str]
    """Shape names drawn by ``sparsectx.data.render`` (circle, square, triangle, diamond, star, hexagon)."""
    large_size: list[int]
    """[min, max] side in pixels of a normal object."""
    small_size: list[int]
    """[min, max] side in pixels of a small object (about one merged 28x28 token)."""
    small_fraction: float
    """Chance that a free (non-target) object is small."""
    gap: int
    """Minimum empty pixels between any two placed boxes."""
    margin: int
    """Minimum empty pixels between a box and the image border."""
    placement_tries: int
    """Random positions tried per box before the scene is redrawn."""

    def __post_init__(self) -> None:
        if self.image_size < 28:
            raise ValueError(f"data.scene.image_size={self.image_size} must be >= 28")
        check_range(self.large_size, "data.scene.large_size", 4)
        check_range(self.small_size, "data.scene.small_size", 4)
        if self.small_size[1] >= self.large_size[0]:
            raise ValueError(
                f"data.scene.small_size={list(self.small_size)} must stay below "
                f"data.scene.large_size={list(self.large_size)}"
            )
        if len(self.colors) < 4 or len(self.shapes) < 4:
            raise ValueError("data.scene.colors and data.scene.shapes need at least 4 entries each (MCQ has 4 options)")
        if not 0.0 <= self.small_fraction <= 1.0:
            raise ValueError(f"data.scene.small_fraction={self.small_fraction} must lie in [0, 1]")


@dataclass
class DetailConfig:
    num_large: list[int]
    """[min, max] normal-size distractors around the one small target."""
    num_small: list[int]
    """[min, max] other small objects (differing from the target in colour and shape)."""


@dataclass
class CountConfig:
    count: list[int]
    """[min, max] of the true count."""
    num_distractors: list[int]
    """[min, max] non-matching objects."""


@dataclass
class SpatialConfig:
    num_distractors: list[int]
    """[min, max] objects besides the two that are asked about."""
    min_offset: int
    """Minimum centre distance in pixels along the relation's axis."""
    trace: str
    """Reference reasoning: ``direct`` states the relation at once; ``grid`` first gives each object's
    row and column on a ``grid_cells`` x ``grid_cells`` grid, then the relation."""
    grid_cells: int
    """Cells per image side for the ``grid`` trace."""

    def __post_init__(self) -> None:
        check_choice(self.trace, SPATIAL_TRACES, "data.families.spatial.trace")
        if self.grid_cells < 2:
            raise ValueError(f"data.families.spatial.grid_cells={self.grid_cells} must be >= 2")


SPATIAL_TRACES = ("direct", "grid")


@dataclass
class OcrConfig:
    word_length: list[int]
    """[min, max] capital letters in the rendered word."""
    text_scale: list[int]
    """[min, max] integer upscale of the 6x11 bitmap font."""
    num_distractors: list[int]
    """[min, max] shapes drawn around the word."""


@dataclass
class PopeConfig:
    num_objects: list[int]
    """[min, max] objects in the scene."""
    popular_top_k: int
    """A popular negative is drawn from the k most frequent absent (colour, shape) pairs."""


@dataclass
class McqConfig:
    count: list[int]
    """[min, max] true count for counting questions."""
    num_distractors: list[int]
    """[min, max] other objects in the scene."""
    trace: str
    """Reference reasoning: ``lookup`` names the answer's letter after the percept ("..., which is option
    B."); ``walk`` checks the options in order and stops at the match ("A. red: no. B. blue: yes.")."""

    def __post_init__(self) -> None:
        check_choice(self.trace, MCQ_TRACES, "data.families.mcq.trace")


MCQ_TRACES = ("lookup", "walk")


@dataclass
class DescribeConfig:
    num_objects: list[int]
    """[min, max] objects to describe."""


@dataclass
class FamiliesConfig:
    detail: DetailConfig
    count: CountConfig
    spatial: SpatialConfig
    ocr: OcrConfig
    pope: PopeConfig
    mcq: McqConfig
    describe: DescribeConfig

    def __post_init__(self) -> None:
        check_range(self.count.count, "data.families.count.count", 0)
        check_range(self.mcq.count, "data.families.mcq.count", 1)
        check_range(self.ocr.word_length, "data.families.ocr.word_length", 1)
        check_range(self.ocr.text_scale, "data.families.ocr.text_scale", 1)
        if self.pope.popular_top_k < 1:
            raise ValueError(f"data.families.pope.popular_top_k={self.pope.popular_top_k} must be >= 1")


@dataclass
class BenchConfig:
    family: str
    """Task family that fills this benchmark file."""
    size: int
    """Number of items (rows) in the file."""


@dataclass
class TrainConfig:
    size: int
    """Number of items in train.tsv."""
    family_weights: dict[str, float]
    """Family -> relative sampling weight in the training split."""


@dataclass
class PromptConfig:
    system: str
    """System message of every prompt."""
    instruction: str
    """Sentence appended to every question (asks for <think> then <answer>)."""
    mcq_hint: str
    """Line after the options of a multiple-choice question."""


@dataclass
class SuiteConfig:
    name: str
    """Suite name; equals the YAML stem under conf/data/."""
    seed: int
    """Root seed of every random choice in the suite (see ``sparsectx.seeding.derive_seed``)."""
    out_dir: str
    """Folder receiving <bench>.tsv and train.tsv."""
    scene: SceneConfig
    families: FamiliesConfig
    benches: dict[str, BenchConfig]
    train: TrainConfig
    prompt: PromptConfig

    def __post_init__(self) -> None:
        if self.seed is None or isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"data.seed={self.seed!r} must be an int")
        pairs = len(self.scene.colors) * len(self.scene.shapes)
        if self.families.pope.num_objects[1] >= pairs:
            raise ValueError(
                f"data.families.pope.num_objects={list(self.families.pope.num_objects)} must stay below the "
                f"{pairs} (colour, shape) pairs, or no absent object is left to ask about"
            )
        known = set(FamiliesConfig.__dataclass_fields__)
        for bench, spec in self.benches.items():
            if bench == "train":
                raise ValueError("data.benches.train: 'train' names the training split; rename the benchmark")
            if spec.family not in known:
                raise ValueError(f"data.benches.{bench}.family={spec.family!r} is not one of {sorted(known)}")
            if spec.family in TRAIN_ONLY_FAMILIES:
                raise ValueError(
                    f"data.benches.{bench}.family={spec.family!r} is training-only; pick one of "
                    f"{sorted(known - TRAIN_ONLY_FAMILIES)}"
                )
            if spec.size < 1:
                raise ValueError(f"data.benches.{bench}.size={spec.size} must be >= 1")
        for family, weight in self.train.family_weights.items():
            if family not in known or weight < 0:
                raise ValueError(
                    f"data.train.family_weights.{family}={weight}: the family must be one of {sorted(known)} "
                    "and the weight >= 0"
                )
        if sum(self.train.family_weights.values()) <= 0:
            raise ValueError("data.train.family_weights must have a positive total")
        if self.train.size < 0:
            raise ValueError(f"data.train.size={self.train.size} must be >= 0")


def load_suite_config(cfg: DictConfig) -> SuiteConfig:
    """Returns the ``data`` node as a checked ``SuiteConfig``; unknown, missing or mistyped keys raise, all at
    once."""
    return load_config(SuiteConfig, cfg, "the data suite config (conf/data/)")


@dataclass
class MediaConfig:
    """Limits on decoding images and videos from untrusted files (``conf/data/media/limits.yaml``)."""

    image_formats: list[str]
    """Pillow format names an image may have (``Image.open(formats=...)``); any other format never reaches its
    decoder and its row is refused."""
    max_image_pixels: int
    """Most pixels (width x height, read from the header before decoding) of an image or a video frame."""
    max_frame_pixels: int
    """A video frame with more pixels is downscaled (aspect kept) while it decodes, before it is kept."""
    video_formats: list[str]
    """FFmpeg demuxers a video file may be read through (FFmpeg's ``format_whitelist``)."""
    decode_budget_mib: float
    """Decoded RGB bytes (MiB) the items of one engine call may hold at once; a call above it is split."""

    def __post_init__(self) -> None:
        Image.init()  # registers every plugin, so Image.OPEN lists every format Pillow opens
        unknown = sorted(set(self.image_formats) - set(Image.OPEN))
        if not self.image_formats or unknown:
            raise ValueError(
                f"image_formats={list(self.image_formats)} in {MEDIA_CONFIG}: {unknown or 'empty'}; name formats "
                f"Pillow opens, from {sorted(Image.OPEN)}"
            )
        if not self.video_formats or any("," in name or not name.strip() for name in self.video_formats):
            raise ValueError(
                f"video_formats={list(self.video_formats)} in {MEDIA_CONFIG}: name one FFmpeg demuxer per entry "
                "(`ffmpeg -demuxers` lists them), e.g. [mp4, matroska, avi]"
            )
        for key in ("max_image_pixels", "max_frame_pixels", "decode_budget_mib"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{key}={getattr(self, key)} in {MEDIA_CONFIG} must be > 0")
        if self.max_frame_pixels > self.max_image_pixels:
            raise ValueError(
                f"max_frame_pixels={self.max_frame_pixels} in {MEDIA_CONFIG} exceeds max_image_pixels="
                f"{self.max_image_pixels}: a frame above the image cap is refused before it could be downscaled"
            )


MEDIA_CONFIG = CONF_DIR / "data" / "media" / "limits.yaml"
"""The media limits every reader and decoder of images and video applies (``sparsectx.data.media``)."""


def load_media_config() -> MediaConfig:
    """Returns the checked media limits of ``MEDIA_CONFIG``; unknown, missing or mistyped keys raise naming the key,
    all at once."""
    return load_config(MediaConfig, OmegaConf.load(MEDIA_CONFIG), str(MEDIA_CONFIG))
