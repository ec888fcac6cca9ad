"""The synthetic video family: short clips of the tiny world's shapes and a temporal question about each.

Three kinds of question, fixed by the item's slot like the image families' balanced designs (kind =
``slot % 3``, answer letter = ``(slot // 3) % 4``, so 12 rows balance both):

- ``moved``: every object stands still except one, which slides from one free spot to another;
  "Which object moved?"
- ``order``: two objects appear one after the other among still ones; "Which object appeared first?"
- ``blink``: one object vanishes for single frames a number of times; "How many times did X blink?"

Every answer is one of four options (A-D) and follows from the frames alone: no single frame tells which
object moved or appeared first, and a blink count needs every frame. Each item has its own random stream
``derive_seed(seed, bench, n)``; frames are drawn by ``render.render_image`` at the family's frame size
with the suite's palette, so the same configs give byte-identical files. The benchmark file is the image
suite's TSV layout with a ``frames`` column (``sparsectx.data.tsv``) and the clip's ``fps``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig

from sparsectx.checks import check_choice
from sparsectx.config_schema import load_config
from sparsectx.data.config import MCQ_TRACES, SceneConfig, SuiteConfig, check_range
from sparsectx.data.families import LETTERS, format_trace, mcq_thought
from sparsectx.data.render import encode_png, render_image
from sparsectx.data.scenes import PlacementError, Scene, SceneObject, draw_free_specs, place_all, place_object
from sparsectx.data.tsv import FPS_COLUMN, Item, write_tsv
from sparsectx.seeding import derive_seed

KINDS = ("moved", "order", "blink")


@dataclass
class VideoFamilyConfig:
    """The video benchmark's own settings (``conf/data/video/<name>.yaml``); scene and prompt are the suite's."""

    name: str
    """Benchmark name; the file is ``<suite out_dir>/<name>.tsv`` and the bench config ``conf/bench/<name>``."""
    size: int
    """Number of items (a multiple of 12 balances kinds and answer letters exactly)."""
    frames: int
    """Frames per clip (all of them are stored; the bench config samples ``video.frames`` of them)."""
    fps: float
    """Frames per second the clip is played at (its timestamps and Qwen2.5-VL's temporal spacing)."""
    frame_size: int
    """Frame side in pixels (a multiple of patch x merge keeps frames unresized)."""
    num_still: list[int]
    """[low, high] objects that stand still in every frame, besides the question's objects."""
    blinks: list[int]
    """[low, high] blinks of the ``blink`` kind (each one frame off; never the first or last frame)."""
    trace: str
    """Reference-trace style, as the image MCQ family's: ``walk`` checks the options in order up to the
    answer ("A. the red circle: no. B. the blue star: yes."), ``lookup`` names the letter at once."""

    def __post_init__(self) -> None:
        key = f"data.video.{self.name}"
        if self.size < 1 or self.frames < 4 or not self.fps > 0:
            raise ValueError(
                f"{key}: size >= 1, frames >= 4 and fps > 0 are needed (got {self.size}, {self.frames}, {self.fps})"
            )
        check_choice(self.trace, MCQ_TRACES, f"{key}.trace")
        check_range(self.num_still, f"{key}.num_still", 0)
        check_range(self.blinks, f"{key}.blinks", 1)
        if self.blinks[1] > (self.frames - 1) // 2:
            raise ValueError(
                f"{key}.blinks={self.blinks}: {self.frames} frames hold at most {(self.frames - 1) // 2} "
                "separate one-frame blinks"
            )


@dataclass(frozen=True)
class VideoSpec:
    """One generated clip and its question, before the frames are drawn."""

    scenes: tuple[Scene, ...]
    question: str
    options: dict[str, str]
    answer: str
    trace: str
    kind: str


def _options(rng: random.Random, correct: str, wrong: list[str], letter: str) -> dict[str, str]:
    """Returns four options: ``correct`` at ``letter``, the three ``wrong`` ones around it in random order."""
    others = rng.sample(wrong, len(LETTERS) - 1)
    others.insert(LETTERS.index(letter), correct)
    return dict(zip(LETTERS, others, strict=True))


def _distinct(specs: list) -> list:
    """Returns ``specs`` if no two share colour and shape (else a question could name two objects)."""
    if len({(s.color, s.shape) for s in specs}) < len(specs):
        raise PlacementError("two objects look alike; redraw")
    return specs


def _moved(rng: random.Random, scene: SceneConfig, cfg: VideoFamilyConfig, letter: str) -> VideoSpec:
    specs = _distinct(draw_free_specs(rng, scene, max(rng.randint(*cfg.num_still), 3) + 1, set()))
    taken: list = []
    objects = place_all(rng, specs, scene, taken)
    end = place_object(rng, specs[0], taken, scene)
    mover = objects[0]
    scenes = []
    for f in range(cfg.frames):
        share = f / (cfg.frames - 1)
        at = replace(
            mover, cx=round(mover.cx + share * (end.cx - mover.cx)), cy=round(mover.cy + share * (end.cy - mover.cy))
        )
        scenes.append(Scene(scene.image_size, (at, *objects[1:]), None))
    names = [f"the {o.color} {o.shape}" for o in objects]
    options = _options(rng, names[0], names[1:], letter)
    thought = mcq_thought(f"Only {names[0]} changes place between the frames", options, letter, cfg.trace)
    return VideoSpec(tuple(scenes), "Which object moved?", options, letter, format_trace(thought, letter), "moved")


def _order(rng: random.Random, scene: SceneConfig, cfg: VideoFamilyConfig, letter: str) -> VideoSpec:
    specs = _distinct(draw_free_specs(rng, scene, max(rng.randint(*cfg.num_still), 2) + 2, set()))
    objects = place_all(rng, specs, scene)
    first_at = rng.randint(1, cfg.frames // 2 - 1)
    second_at = rng.randint(first_at + 1, cfg.frames - 1)
    first, second, still = objects[0], objects[1], objects[2:]
    scenes = []
    for f in range(cfg.frames):
        shown = [o for o, start in ((first, first_at), (second, second_at)) if f >= start]
        scenes.append(Scene(scene.image_size, (*shown, *still), None))
    names = [f"the {o.color} {o.shape}" for o in objects]
    # The later arrival is always a wrong option, so presence alone never answers the question.
    options = _options(rng, names[0], [names[1], *rng.sample(names[2:], 2)], letter)
    seen = f"{names[0].capitalize()} appears at frame {first_at + 1}, {names[1]} at frame {second_at + 1}"
    thought = mcq_thought(f"{seen}; the first is {names[0]}", options, letter, cfg.trace)
    return VideoSpec(
        tuple(scenes), "Which object appeared first?", options, letter, format_trace(thought, letter), "order"
    )


def _blink(rng: random.Random, scene: SceneConfig, cfg: VideoFamilyConfig, letter: str) -> VideoSpec:
    specs = draw_free_specs(rng, scene, rng.randint(*cfg.num_still) + 1, set())
    objects = place_all(rng, specs, scene)
    target: SceneObject = objects[0]
    count = rng.randint(*cfg.blinks)
    # One-frame blinks, never adjacent, never the first or last frame: count starts in 1..frames-count-1,
    # spread by adding i to the i-th, which keeps a visible frame between any two.
    off = [start + i for i, start in enumerate(sorted(rng.sample(range(1, cfg.frames - count), count)))]
    scenes = [
        Scene(scene.image_size, tuple(o for o in objects if f not in off or o is not target), None)
        for f in range(cfg.frames)
    ]
    options = _options(rng, str(count), [str(k) for k in range(cfg.blinks[1] + 4) if k != count], letter)
    name = f"the {target.color} {target.shape}"
    frames = f"frame{'s' if count > 1 else ''} {', '.join(str(f + 1) for f in off)}"
    seen = f"{name.capitalize()} is missing in {frames}: {count} time{'s' if count > 1 else ''}"
    thought = mcq_thought(seen, options, letter, cfg.trace)
    return VideoSpec(
        tuple(scenes), f"How many times did {name} blink?", options, letter, format_trace(thought, letter), "blink"
    )


MAKERS = {"moved": _moved, "order": _order, "blink": _blink}


def generate_clip(rng: random.Random, slot: int, scene: SceneConfig, cfg: VideoFamilyConfig) -> VideoSpec:
    """Returns the clip of ``slot`` (kind ``slot % 3``, letter ``(slot // 3) % 4``), redrawing on failure.

    Raises:
        RuntimeError: no clip could be placed in ``scene.placement_tries`` tries.
    """
    kind, letter = KINDS[slot % len(KINDS)], LETTERS[(slot // len(KINDS)) % len(LETTERS)]
    for _ in range(scene.placement_tries):
        try:
            return MAKERS[kind](rng, scene, cfg, letter)
        except PlacementError:
            continue
    raise RuntimeError(f"video family {cfg.name!r}: no {kind} clip placed in {scene.placement_tries} tries")


def video_items(suite: SuiteConfig, cfg: VideoFamilyConfig) -> list[Item]:
    """Returns the benchmark's items: row n is slot n from stream ``(suite.seed, cfg.name, n)``."""
    scene = replace(suite.scene, image_size=cfg.frame_size)
    items = []
    for n in range(cfg.size):
        spec = generate_clip(random.Random(derive_seed(suite.seed, cfg.name, n)), n, scene, cfg)
        frames = [encode_png(render_image(s, scene.colors, scene.background)) for s in spec.scenes]
        items.append(
            Item(
                index=n,
                image_bytes=b"",
                question=spec.question,
                options=spec.options,
                answer=spec.answer,
                category=spec.kind,
                family="video",
                subset="",
                trace=spec.trace,
                scene="",
                extra={FPS_COLUMN: str(cfg.fps)},
                frames=tuple(frames),
            )
        )
    return items


def build_video_bench(suite: SuiteConfig, cfg: VideoFamilyConfig) -> Path:
    """Returns the path after atomically writing ``<suite.out_dir>/<cfg.name>.tsv``."""
    path = Path(suite.out_dir) / f"{cfg.name}.tsv"
    write_tsv(path, video_items(suite, cfg))
    return path


def load_video_family_config(cfg: DictConfig) -> VideoFamilyConfig:
    """Returns the checked family config of ``conf/data/video/<name>.yaml`` (unknown or missing keys raise, all
    at once)."""
    return load_config(VideoFamilyConfig, cfg, "the video family config (conf/data/video/)")
