"""Scene descriptions (coloured shapes and an optional word on a plain background) and facts about them.

A scene is plain data: every answer of every task family is a function of the scene alone, which the
tests re-derive independently. Placement is seeded by the caller's ``random.Random``.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from typing import NamedTuple

from sparsectx.data.config import SceneConfig

Box = tuple[int, int, int, int]  # x0, y0, x1, y1 with x1, y1 exclusive


class PlacementError(RuntimeError):
    """No free position was found for a box; the caller redraws the scene."""


class ObjectSpec(NamedTuple):
    """What to draw, before a position is chosen."""

    shape: str
    color: str
    small: bool
    size: int


@dataclass(frozen=True)
class SceneObject:
    """One shape, drawn inside the ``size`` x ``size`` square centred at (cx, cy)."""

    shape: str
    color: str
    small: bool
    cx: int
    cy: int
    size: int

    @property
    def box(self) -> Box:
        """Returns the bounding square (x0, y0, x1, y1), x1 and y1 exclusive."""
        x0, y0 = self.cx - self.size // 2, self.cy - self.size // 2
        return x0, y0, x0 + self.size, y0 + self.size

    @property
    def name(self) -> str:
        """Returns the noun phrase, e.g. ``"small red circle"``."""
        return f"{'small ' if self.small else ''}{self.color} {self.shape}"


@dataclass(frozen=True)
class TextLabel:
    """A word of capital letters drawn with the bitmap font, upscaled ``scale`` times, top-left at (x, y)."""

    word: str
    color: str
    x: int
    y: int
    scale: int
    width: int
    height: int


@dataclass(frozen=True)
class Scene:
    """Everything drawn on one image."""

    image_size: int
    objects: tuple[SceneObject, ...]
    text: TextLabel | None

    def to_json(self) -> str:
        """Returns the scene as compact JSON (no tabs or newlines, so it fits a TSV cell)."""
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Scene:
        """Returns the scene serialised by ``to_json``.

        Raises:
            ValueError: the text is not such a scene (not JSON, nested too deeply, or other keys), naming the cell.
        """
        try:
            raw = json.loads(text)
            label = raw["text"]
            return Scene(
                image_size=raw["image_size"],
                objects=tuple(SceneObject(**obj) for obj in raw["objects"]),
                text=None if label is None else TextLabel(**label),
            )
        except (ValueError, KeyError, TypeError, MemoryError, RecursionError) as error:
            raise ValueError(
                f"scene cell {text[:60]!r} is not a scene written by Scene.to_json ({type(error).__name__}: "
                f"{str(error)[:120]}); rebuild the file with `python src/build_data.py`"
            ) from error


def plural(shape: str) -> str:
    """Returns the plural of a shape name (every configured shape takes -s)."""
    return f"{shape}es" if shape.endswith(("s", "x", "ch", "sh")) else f"{shape}s"


def count_phrase(count: int, noun: str) -> str:
    """Returns e.g. ``"1 red circle"`` or ``"3 red circles"``; ``noun`` ends in the shape name."""
    if count == 1:
        return f"1 {noun}"
    head, _, shape = noun.rpartition(" ")
    return f"{count} {head + ' ' if head else ''}{plural(shape)}"


def relation(a: SceneObject, b: SceneObject, min_offset: int) -> str | None:
    """Returns where ``a`` lies relative to ``b`` (left, right, above, below), or None when ambiguous.

    The relation holds when the centre offset along one axis is at least ``min_offset`` pixels and at
    least twice the offset along the other axis.
    """
    dx, dy = a.cx - b.cx, a.cy - b.cy
    if abs(dx) >= max(min_offset, 2 * abs(dy)):
        return "left" if dx < 0 else "right"
    if abs(dy) >= max(min_offset, 2 * abs(dx)):
        return "above" if dy < 0 else "below"
    return None


RELATION_PHRASES = {"left": "to the left of", "right": "to the right of", "above": "above", "below": "below"}


def position_name(obj: SceneObject, image_size: int) -> str:
    """Returns the cell of a 3x3 grid holding the object's centre, e.g. ``"top left"`` or ``"center"``."""
    col = min(2, obj.cx * 3 // image_size)
    row = min(2, obj.cy * 3 // image_size)
    vertical = ("top", "", "bottom")[row]
    horizontal = ("left", "", "right")[col]
    return " ".join(part for part in (vertical, horizontal) if part) or "center"


def grid_cell(obj: SceneObject, image_size: int, cells: int) -> str:
    """Returns the object's centre as ``"row r, column c"`` on a ``cells`` x ``cells`` grid, counted from 1
    at the top left, a finer locator than :func:`position_name` for stepwise spatial reasoning."""
    row = min(cells - 1, obj.cy * cells // image_size) + 1
    col = min(cells - 1, obj.cx * cells // image_size) + 1
    return f"row {row}, column {col}"


def _overlaps(box: Box, others: list[Box], gap: int) -> bool:
    x0, y0, x1, y1 = box
    return any(x0 < b[2] + gap and b[0] < x1 + gap and y0 < b[3] + gap and b[1] < y1 + gap for b in others)


def place_box(rng: random.Random, width: int, height: int, taken: list[Box], cfg: SceneConfig) -> Box:
    """Returns a free box of the given size, ``cfg.gap`` or more from all taken boxes; adds it to ``taken``.

    Raises:
        PlacementError: no free position was found in ``cfg.placement_tries`` draws.
    """
    high_x = cfg.image_size - cfg.margin - width
    high_y = cfg.image_size - cfg.margin - height
    if high_x < cfg.margin or high_y < cfg.margin:
        raise PlacementError(f"a {width}x{height} box does not fit a {cfg.image_size}px image")
    for _ in range(cfg.placement_tries):
        x0, y0 = rng.randint(cfg.margin, high_x), rng.randint(cfg.margin, high_y)
        box = (x0, y0, x0 + width, y0 + height)
        if not _overlaps(box, taken, cfg.gap):
            taken.append(box)
            return box
    raise PlacementError(f"no free position for a {width}x{height} box among {len(taken)} others")


def place_object(rng: random.Random, spec: ObjectSpec, taken: list[Box], cfg: SceneConfig) -> SceneObject:
    """Returns ``spec`` placed at a free position (see ``place_box``)."""
    x0, y0, _, _ = place_box(rng, spec.size, spec.size, taken, cfg)
    half = spec.size // 2
    return SceneObject(spec.shape, spec.color, spec.small, x0 + half, y0 + half, spec.size)


def draw_spec(rng: random.Random, cfg: SceneConfig, shape: str, color: str, small: bool) -> ObjectSpec:
    """Returns an object spec whose side is drawn from the small or the large size range."""
    low, high = cfg.small_size if small else cfg.large_size
    return ObjectSpec(shape, color, small, rng.randint(low, high))


def draw_free_specs(
    rng: random.Random, cfg: SceneConfig, count: int, forbidden: set[tuple[str, str]]
) -> list[ObjectSpec]:
    """Returns ``count`` random objects whose (colour, shape) pair is not in ``forbidden``."""
    pairs = [(c, s) for c in cfg.colors for s in cfg.shapes if (c, s) not in forbidden]
    specs = []
    for _ in range(count):
        color, shape = rng.choice(pairs)
        specs.append(draw_spec(rng, cfg, shape, color, rng.random() < cfg.small_fraction))
    return specs


def place_all(
    rng: random.Random, specs: list[ObjectSpec], cfg: SceneConfig, taken: list[Box] | None = None
) -> list[SceneObject]:
    """Returns every spec placed without overlap (raises PlacementError when the image is too full)."""
    boxes = [] if taken is None else taken
    return [place_object(rng, spec, boxes, cfg) for spec in specs]


def shuffled(rng: random.Random, objects: list[SceneObject]) -> tuple[SceneObject, ...]:
    """Returns the objects in random order, so a target's position in the list tells nothing."""
    out = list(objects)
    rng.shuffle(out)
    return tuple(out)
