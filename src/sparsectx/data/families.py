"""The task families: each draws a scene and asks one question whose answer follows from that scene.

A family is a function ``(rng, slot, ctx) -> ItemSpec``. ``slot`` is the item's position in a balanced
design (for a benchmark, its row number): it fixes the question variant, POPE's subset and yes/no, the
spatial relation and the MCQ answer letter, so every benchmark file is balanced by construction.
Everything else comes from ``rng``.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass

from sparsectx.data.config import FamiliesConfig, SceneConfig
from sparsectx.data.render import text_size
from sparsectx.data.scenes import (
    RELATION_PHRASES,
    Box,
    ObjectSpec,
    PlacementError,
    Scene,
    SceneObject,
    TextLabel,
    count_phrase,
    draw_free_specs,
    draw_spec,
    grid_cell,
    place_all,
    place_box,
    place_object,
    plural,
    position_name,
    relation,
    shuffled,
)
from sparsectx.registry import Registry

LETTERS = ("A", "B", "C", "D")
RELATIONS = ("left", "right", "above", "below")
POPE_SUBSETS = ("random", "popular", "adversarial")


@dataclass(frozen=True)
class ItemSpec:
    """One generated question about one scene, before the image is drawn."""

    scene: Scene
    question: str
    options: dict[str, str]
    """Letter -> option text for multiple choice; empty otherwise."""
    answer: str
    trace: str
    """Reference output ``<think>…</think><answer>…</answer>``."""
    category: str
    subset: str


@dataclass(frozen=True)
class FamilyContext:
    """What a family needs besides its random source."""

    scene: SceneConfig
    families: FamiliesConfig
    popularity: tuple[tuple[str, str], ...]
    """Every (colour, shape) pair, most frequent first (POPE's object frequency)."""


MakeItem = Callable[[random.Random, int, FamilyContext], ItemSpec]
FAMILIES: Registry[MakeItem] = Registry("task family")


def format_trace(thought: str, answer: str) -> str:
    """Returns ``<think>thought</think><answer>answer</answer>``."""
    return f"<think>{thought}</think><answer>{answer}</answer>"


def article(phrase: str) -> str:
    """Returns ``phrase`` with ``a`` or ``an`` in front."""
    return f"{'an' if phrase[0] in 'aeiou' else 'a'} {phrase}"


def join_words(words: list[str]) -> str:
    """Returns ``"x"``, ``"x and y"`` or ``"x, y and z"``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _spec(rng: random.Random, cfg: SceneConfig, shape: str, color: str) -> ObjectSpec:
    return draw_spec(rng, cfg, shape, color, rng.random() < cfg.small_fraction)


def _scene(rng: random.Random, cfg: SceneConfig, objects: list[SceneObject], text: TextLabel | None = None) -> Scene:
    return Scene(cfg.image_size, shuffled(rng, objects), text)


@FAMILIES.register("detail")
def make_detail(rng: random.Random, slot: int, ctx: FamilyContext) -> ItemSpec:
    """Returns a V*-style item: the colour (even slot) or shape (odd slot) of the one small object named."""
    cfg, params = ctx.scene, ctx.families.detail
    color, shape = rng.choice(list(cfg.colors)), rng.choice(cfg.shapes)
    others = [(c, s) for c in cfg.colors for s in cfg.shapes if c != color and s != shape]
    specs = [draw_spec(rng, cfg, shape, color, True)]
    for _ in range(rng.randint(*params.num_small)):
        other_color, other_shape = rng.choice(others)
        specs.append(draw_spec(rng, cfg, other_shape, other_color, True))
    for _ in range(rng.randint(*params.num_large)):
        specs.append(draw_spec(rng, cfg, rng.choice(cfg.shapes), rng.choice(list(cfg.colors)), False))
    objects = place_all(rng, specs, cfg)
    where = position_name(objects[0], cfg.image_size)
    if slot % 2 == 0:
        question, answer, category = f"What color is the small {shape}?", color, "color"
        thought = f"The small {shape} at {where} is {color}."
    else:
        question, answer, category = f"What shape is the small {color} object?", shape, "shape"
        thought = f"The small {color} object at {where} is {article(shape)}."
    return ItemSpec(_scene(rng, cfg, objects), question, {}, answer, format_trace(thought, answer), category, "")


@FAMILIES.register("count")
def make_count(rng: random.Random, slot: int, ctx: FamilyContext) -> ItemSpec:
    """Returns a CV-Bench-style count of one colour+shape (even slot) or of one shape in any colour (odd)."""
    cfg, params = ctx.scene, ctx.families.count
    color, shape = rng.choice(list(cfg.colors)), rng.choice(cfg.shapes)
    by_shape = slot % 2 == 1
    count = rng.randint(*params.count)
    colors = [rng.choice(list(cfg.colors)) if by_shape else color for _ in range(count)]
    specs = [_spec(rng, cfg, shape, c) for c in colors]
    forbidden = {(c, shape) for c in cfg.colors} if by_shape else {(color, shape)}
    specs += draw_free_specs(rng, cfg, rng.randint(*params.num_distractors), forbidden)
    objects = place_all(rng, specs, cfg)
    noun = shape if by_shape else f"{color} {shape}"
    head = "" if by_shape else f"{color} "
    question = f"How many {head}{plural(shape)} are there?"
    answer = str(count)
    thought = f"I see {count_phrase(count, noun)}."
    category = "count_shape" if by_shape else "count_color_shape"
    return ItemSpec(_scene(rng, cfg, objects), question, {}, answer, format_trace(thought, answer), category, "")


@FAMILIES.register("spatial")
def make_spatial(rng: random.Random, slot: int, ctx: FamilyContext) -> ItemSpec:
    """Returns a GQA-style item: where one object lies relative to another (relation fixed by slot)."""
    cfg, params = ctx.scene, ctx.families.spatial
    want = RELATIONS[slot % len(RELATIONS)]
    pairs = [(c, s) for c in cfg.colors for s in cfg.shapes]
    pair_a, pair_b = rng.sample(pairs, 2)
    spec_a, spec_b = _spec(rng, cfg, pair_a[1], pair_a[0]), _spec(rng, cfg, pair_b[1], pair_b[0])
    for _ in range(cfg.placement_tries):
        taken: list[Box] = []
        a, b = place_object(rng, spec_a, taken, cfg), place_object(rng, spec_b, taken, cfg)
        if relation(a, b, params.min_offset) == want:
            break
    else:
        raise PlacementError(f"no unambiguous '{want}' placement found")
    specs = draw_free_specs(rng, cfg, rng.randint(*params.num_distractors), {pair_a, pair_b})
    objects = [a, b, *place_all(rng, specs, cfg, taken)]
    name_a, name_b = f"{pair_a[0]} {pair_a[1]}", f"{pair_b[0]} {pair_b[1]}"
    question = f"Is the {name_a} left of, right of, above, or below the {name_b}?"
    claim = f"{name_a} is {RELATION_PHRASES[want]} the {name_b}."
    thought = f"The {claim}"
    if params.trace == "grid":
        where_a, where_b = (grid_cell(obj, cfg.image_size, params.grid_cells) for obj in (a, b))
        thought = f"The {name_a} is in {where_a}; the {name_b} is in {where_b}; so the {claim}"
    return ItemSpec(_scene(rng, cfg, objects), question, {}, want, format_trace(thought, want), "relation", "")


@FAMILIES.register("ocr")
def make_ocr(rng: random.Random, slot: int, ctx: FamilyContext) -> ItemSpec:
    """Returns a TextVQA-style item: read a rendered word of random capital letters among shapes."""
    cfg, params = ctx.scene, ctx.families.ocr
    word = "".join(rng.choice(string.ascii_uppercase) for _ in range(rng.randint(*params.word_length)))
    scale = rng.randint(*params.text_scale)
    width, height = text_size(word, scale)
    taken: list[Box] = []
    x0, y0, _, _ = place_box(rng, width, height, taken, cfg)
    label = TextLabel(word, rng.choice(list(cfg.colors)), x0, y0, scale, width, height)
    objects = place_all(rng, draw_free_specs(rng, cfg, rng.randint(*params.num_distractors), set()), cfg, taken)
    question = "What word is written in the image?"
    thought = f"The letters are {', '.join(word)}."
    return ItemSpec(_scene(rng, cfg, objects, label), question, {}, word, format_trace(thought, word), "text", "")


def _pope_negative(rng: random.Random, subset: str, objects: list[SceneObject], ctx: FamilyContext) -> tuple[str, str]:
    present = {(o.color, o.shape) for o in objects}
    absent = [pair for pair in ctx.popularity if pair not in present]  # most popular first
    if subset == "random":
        return rng.choice(absent)
    if subset == "popular":
        return rng.choice(absent[: ctx.families.pope.popular_top_k])
    colors, shapes = {o.color for o in objects}, {o.shape for o in objects}
    # Adversarial: both attributes are in the image, only not together; else share the shape, else the colour.
    for keep in (
        lambda c, s: c in colors and s in shapes,
        lambda c, s: s in shapes,
        lambda c, s: c in colors,
    ):
        close = [(c, s) for c, s in absent if keep(c, s)]
        if close:
            return rng.choice(close)
    return rng.choice(absent)


@FAMILIES.register("pope")
def make_pope(rng: random.Random, slot: int, ctx: FamilyContext) -> ItemSpec:
    """Returns a POPE-style yes/no existence item; slot fixes yes (even) / no (odd) and the negative subset.

    Objects follow a Zipf-like popularity over (colour, shape) pairs, so "popular" negatives are the
    frequent pairs that are absent, and "adversarial" ones combine a present colour with a present shape.
    """
    cfg, params = ctx.scene, ctx.families.pope
    subset, positive = POPE_SUBSETS[(slot // 2) % len(POPE_SUBSETS)], slot % 2 == 0
    weights = [1.0 / (rank + 1) for rank in range(len(ctx.popularity))]
    pairs = rng.choices(ctx.popularity, weights=weights, k=rng.randint(*params.num_objects))
    objects = place_all(rng, [_spec(rng, cfg, s, c) for c, s in pairs], cfg)
    if positive:
        color, shape = rng.choice(sorted({(o.color, o.shape) for o in objects}))
    else:
        color, shape = _pope_negative(rng, subset, objects, ctx)
    answer = "yes" if positive else "no"
    same_shape = sorted({o.color for o in objects if o.shape == shape} - {color})
    if positive:
        thought = f"I see {article(f'{color} {shape}')}."
    elif same_shape:
        thought = f"I see {plural(shape)} in {join_words(same_shape)} but none in {color}."
    else:
        thought = f"I see no {plural(shape)}."
    question = f"Is there {article(f'{color} {shape}')} in the image?"
    return ItemSpec(_scene(rng, cfg, objects), question, {}, answer, format_trace(thought, answer), subset, subset)


@FAMILIES.register("mcq")
def make_mcq(rng: random.Random, slot: int, ctx: FamilyContext) -> ItemSpec:
    """Returns an MMBench-style 4-option item (colour, shape or count); slot fixes the kind and the letter."""
    cfg, params = ctx.scene, ctx.families.mcq
    kind, letter = ("color", "shape", "count")[(slot // 4) % 3], LETTERS[slot % 4]
    color, shape = rng.choice(list(cfg.colors)), rng.choice(cfg.shapes)
    n_free = rng.randint(*params.num_distractors)
    if kind == "count":
        count = rng.randint(*params.count)
        specs = [_spec(rng, cfg, shape, rng.choice(list(cfg.colors))) for _ in range(count)]
        specs += draw_free_specs(rng, cfg, n_free, {(c, shape) for c in cfg.colors})
        question, correct = f"How many {plural(shape)} are there?", str(count)
        pool = [str(k) for k in range(params.count[1] + 3) if k != count]
        thought = f"I see {count_phrase(count, shape)}"
    elif kind == "color":
        specs = [_spec(rng, cfg, shape, color)]
        specs += draw_free_specs(rng, cfg, n_free, {(c, shape) for c in cfg.colors})
        question, correct = f"What color is the {shape}?", color
        pool = [c for c in cfg.colors if c != color]
        thought = f"The {shape} is {color}"
    else:
        specs = [_spec(rng, cfg, shape, color)]
        specs += draw_free_specs(rng, cfg, n_free, {(color, s) for s in cfg.shapes})
        question, correct = f"What shape is the {color} object?", shape
        pool = [s for s in cfg.shapes if s != shape]
        thought = f"The {color} object is {article(shape)}"
    wrong = rng.sample(pool, len(LETTERS) - 1)
    wrong.insert(LETTERS.index(letter), correct)
    options = dict(zip(LETTERS, wrong, strict=True))
    objects = place_all(rng, specs, cfg)
    trace = format_trace(mcq_thought(thought, options, letter, params.trace), letter)
    return ItemSpec(_scene(rng, cfg, objects), question, options, letter, trace, kind, "")


def mcq_thought(percept: str, options: dict[str, str], letter: str, style: str) -> str:
    """Returns the MCQ reasoning in ``style`` (``data.families.mcq.trace``, the video family's ``trace``): the
    letter looked up, or reached by checking the options in order, so that the letter answered is the one
    just written."""
    if style == "lookup":
        return f"{percept}, which is option {letter}."
    checks = []
    for option_letter, text in options.items():
        checks.append(f"{option_letter}. {text}: {'yes' if option_letter == letter else 'no'}.")
        if option_letter == letter:
            break
    return f"{percept}. {' '.join(checks)}"


@FAMILIES.register("describe")
def make_describe(rng: random.Random, slot: int, ctx: FamilyContext) -> ItemSpec:
    """Returns a dense description of every object with its grid cell, in reading order (training only)."""
    cfg, params = ctx.scene, ctx.families.describe
    objects = place_all(rng, draw_free_specs(rng, cfg, rng.randint(*params.num_objects), set()), cfg)
    size = cfg.image_size
    ordered = sorted(objects, key=lambda o: (o.cy * 3 // size, o.cx * 3 // size, o.cy, o.cx))
    answer = "; ".join(f"{article(o.name)} at {position_name(o, size)}" for o in ordered)
    thought = f"I see {count_phrase(len(objects), 'object')}."
    question = "Describe every object in the image."
    return ItemSpec(_scene(rng, cfg, objects), question, {}, answer, format_trace(thought, answer), "describe", "")
