"""Every family's answer follows from its scene description, and the image shows that scene."""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import replace

import pytest

from sparsectx.data.families import FAMILIES
from sparsectx.data.scenes import RELATION_PHRASES, Scene, SceneObject
from sparsectx.data.synthetic import SLOT_PERIOD, family_context, generate_spec
from sparsectx.data.tsv import Item, read_tsv

from .conftest import BENCHES, SMALL_BENCH

TRACE = re.compile(r"^<think>[^<>]+</think><answer>([^<>]+)</answer>$")
TRACE_THOUGHT = re.compile(r"^<think>([^<>]+)</think>")


def _items(small_suite, split: str) -> list[Item]:
    return read_tsv(small_suite[1].files[split])[0]


def _scene(item: Item) -> Scene:
    return Scene.from_json(item.scene)


def _shape_of_plural(word: str, shapes: list[str]) -> str:
    (shape,) = [s for s in shapes if word in (f"{s}s", f"{s}es")]
    return shape


def _only(objects: list[SceneObject]) -> SceneObject:
    assert len(objects) == 1, objects
    return objects[0]


@pytest.mark.parametrize("split", [*BENCHES, "train"])
def test_trace_is_think_then_answer_and_ends_in_the_answer(small_suite, split: str) -> None:
    for item in _items(small_suite, split):
        match = TRACE.match(item.trace)
        assert match and match.group(1) == item.answer, item.trace


@pytest.mark.parametrize("split", [*BENCHES, "train"])
def test_image_shows_the_scene(small_suite, split: str) -> None:
    cfg = small_suite[0]
    for item in _items(small_suite, split)[:6]:
        image, scene = item.image(), _scene(item)
        assert image.size == (cfg.scene.image_size, cfg.scene.image_size) and image.mode == "RGB"
        for obj in scene.objects:
            assert list(image.getpixel((obj.cx, obj.cy))) == cfg.scene.colors[obj.color], obj
        boxes = [obj.box for obj in scene.objects]
        for i, a in enumerate(boxes):
            assert a[0] >= 0 and a[2] <= image.width and a[1] >= 0 and a[3] <= image.height
            for b in boxes[i + 1 :]:
                assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
        if scene.text is not None:
            label = scene.text
            crop = image.crop((label.x, label.y, label.x + label.width, label.y + label.height))
            assert tuple(cfg.scene.colors[label.color]) in {rgb for _, rgb in crop.getcolors(1 << 16)}


def test_detail_answer_is_the_one_small_object_named(small_suite) -> None:
    for item in _items(small_suite, "syn_detail"):
        small = [o for o in _scene(item).objects if o.small]
        if item.category == "color":
            (shape,) = re.fullmatch(r"What color is the small (\w+)\?", item.question).groups()
            assert _only([o for o in small if o.shape == shape]).color == item.answer
        else:
            (color,) = re.fullmatch(r"What shape is the small (\w+) object\?", item.question).groups()
            assert _only([o for o in small if o.color == color]).shape == item.answer
    assert Counter(item.category for item in _items(small_suite, "syn_detail")) == {"color": 6, "shape": 6}


def test_count_answer_is_the_number_of_matching_objects(small_suite) -> None:
    shapes = small_suite[0].scene.shapes
    for item in _items(small_suite, "syn_count"):
        words = re.fullmatch(r"How many (.+) are there\?", item.question).group(1).split()
        shape = _shape_of_plural(words[-1], shapes)
        color = words[0] if len(words) == 2 else None
        matching = [o for o in _scene(item).objects if o.shape == shape and color in (None, o.color)]
        assert item.answer == str(len(matching)) and len(matching) >= 1
        assert f"I see {len(matching)} " in item.trace


def test_spatial_answer_matches_the_centres(small_suite) -> None:
    answers = Counter()
    for item in _items(small_suite, "syn_spatial"):
        ca, sa, cb, sb = re.fullmatch(
            r"Is the (\w+) (\w+) left of, right of, above, or below the (\w+) (\w+)\?", item.question
        ).groups()
        objects = _scene(item).objects
        a = _only([o for o in objects if (o.color, o.shape) == (ca, sa)])
        b = _only([o for o in objects if (o.color, o.shape) == (cb, sb)])
        dx, dy = a.cx - b.cx, a.cy - b.cy
        horizontal = abs(dx) > abs(dy)
        truth = ("left" if dx < 0 else "right") if horizontal else ("above" if dy < 0 else "below")
        assert item.answer == truth
        answers[truth] += 1
    assert answers == {"left": 3, "right": 3, "above": 3, "below": 3}


def test_spatial_grid_trace_locates_both_objects_then_states_the_relation(small_suite) -> None:
    cfg = small_suite[0]
    cells = -(-cfg.scene.image_size // cfg.families.spatial.min_offset)  # cells no wider than the offset
    spatial = replace(cfg.families.spatial, trace="grid", grid_cells=cells)
    ctx = family_context(replace(cfg, families=replace(cfg.families, spatial=spatial)))
    pattern = (
        r"The (\w+ \w+) is in row (\d+), column (\d+); the (\w+ \w+) is in row (\d+), column (\d+); "
        r"so the \1 is (to the left of|to the right of|above|below) the \4\."
    )
    for slot in range(24):
        spec = generate_spec("spatial", slot, random.Random(slot), ctx)
        name_a, row_a, col_a, name_b, row_b, col_b, phrase = re.fullmatch(
            pattern, TRACE_THOUGHT.match(spec.trace).group(1)
        ).groups()
        assert phrase == RELATION_PHRASES[spec.answer]
        cell_of = {}
        for obj in spec.scene.objects:
            side = cfg.scene.image_size / cells
            cell_of[f"{obj.color} {obj.shape}"] = (int(obj.cy // side) + 1, int(obj.cx // side) + 1)
        assert cell_of[name_a] == (int(row_a), int(col_a)) and cell_of[name_b] == (int(row_b), int(col_b))
        d_row, d_col = int(row_a) - int(row_b), int(col_a) - int(col_b)
        moved = {"left": -d_col, "right": d_col, "above": -d_row, "below": d_row}[spec.answer]
        assert moved >= 1, spec.trace  # the cells alone already show the relation's direction


def test_unknown_spatial_trace_style_is_refused(small_suite) -> None:
    with pytest.raises(ValueError, match=r"data\.families\.spatial\.trace='steps'.*direct.*grid"):
        replace(small_suite[0].families.spatial, trace="steps")


def test_ocr_answer_is_the_drawn_word(small_suite) -> None:
    for item in _items(small_suite, "syn_ocr"):
        label = _scene(item).text
        assert label is not None and item.answer == label.word and item.answer.isupper()


def test_pope_answer_is_existence_with_three_balanced_subsets(small_suite) -> None:
    cfg = small_suite[0]
    popularity = family_context(cfg).popularity
    items = _items(small_suite, "syn_pope")
    for item in items:
        color, shape = re.fullmatch(r"Is there an? (\w+) (\w+) in the image\?", item.question).groups()
        objects = _scene(item).objects
        present = {(o.color, o.shape) for o in objects}
        assert item.answer == ("yes" if (color, shape) in present else "no")
        assert item.category == item.subset
        if item.answer == "no" and item.subset == "popular":
            absent = [pair for pair in popularity if pair not in present]
            assert (color, shape) in absent[: cfg.families.pope.popular_top_k]
        if item.answer == "no" and item.subset == "adversarial":
            assert color in {o.color for o in objects} or shape in {o.shape for o in objects}
    counts = Counter((item.subset, item.answer) for item in items)
    per_cell = SMALL_BENCH // 6
    assert counts == {(s, a): per_cell for s in ("random", "popular", "adversarial") for a in ("yes", "no")}


def test_mcq_has_four_options_and_the_letter_points_to_the_truth(small_suite) -> None:
    shapes = small_suite[0].scene.shapes
    items = _items(small_suite, "syn_mcq")
    for item in items:
        assert list(item.options) == ["A", "B", "C", "D"] and len(set(item.options.values())) == 4
        objects = _scene(item).objects
        if item.category == "color":
            (shape,) = re.fullmatch(r"What color is the (\w+)\?", item.question).groups()
            truth = _only([o for o in objects if o.shape == shape]).color
        elif item.category == "shape":
            (color,) = re.fullmatch(r"What shape is the (\w+) object\?", item.question).groups()
            truth = _only([o for o in objects if o.color == color]).shape
        else:
            (plural,) = re.fullmatch(r"How many (\w+) are there\?", item.question).groups()
            truth = str(sum(o.shape == _shape_of_plural(plural, shapes) for o in objects))
        assert item.options[item.answer] == truth
    assert Counter(item.answer for item in items) == {letter: 3 for letter in "ABCD"}
    assert Counter(item.category for item in items) == {"color": 4, "shape": 4, "count": 4}


def _mcq_specs(cfg, style: str) -> list:
    families = replace(cfg.families, mcq=replace(cfg.families.mcq, trace=style))
    ctx = family_context(replace(cfg, families=families))
    return [generate_spec("mcq", slot, random.Random(slot), ctx) for slot in range(24)]


def test_mcq_lookup_trace_names_the_answer_letter(small_suite) -> None:
    for spec in _mcq_specs(small_suite[0], "lookup"):
        thought = TRACE_THOUGHT.match(spec.trace).group(1)
        assert thought.endswith(f", which is option {spec.answer}.") and ": yes." not in thought, spec.trace


def test_mcq_walk_trace_checks_the_options_in_order_and_stops_at_the_answer(small_suite) -> None:
    specs = _mcq_specs(small_suite[0], "walk")
    assert {spec.answer for spec in specs} == set("ABCD")
    for spec in specs:
        thought = TRACE_THOUGHT.match(spec.trace).group(1)
        letters = list(spec.options)
        expected = [
            (letter, spec.options[letter], "yes" if letter == spec.answer else "no")
            for letter in letters[: letters.index(spec.answer) + 1]
        ]
        assert re.findall(r"([A-D])\. (\w+): (yes|no)\.", thought) == expected, spec.trace
        assert thought.endswith(f"{spec.answer}. {spec.options[spec.answer]}: yes.")


def test_unknown_mcq_trace_style_is_refused(small_suite) -> None:
    with pytest.raises(ValueError, match=r"data\.families\.mcq\.trace='think'.*lookup.*walk"):
        replace(small_suite[0].families.mcq, trace="think")


def test_describe_lists_every_object_once(small_suite) -> None:
    described = [item for item in _items(small_suite, "train") if item.family == "describe"]
    assert described
    for item in described:
        objects = _scene(item).objects
        parts = item.answer.split("; ")
        assert len(parts) == len(objects)
        assert Counter(re.sub(r"^an? (.+) at .+$", r"\1", p) for p in parts) == Counter(o.name for o in objects)


@pytest.mark.parametrize("family", FAMILIES.names())
def test_every_family_builds_every_slot_of_the_design(small_suite, family: str) -> None:
    ctx = family_context(small_suite[0])
    for slot in range(SLOT_PERIOD):
        spec = generate_spec(family, slot, random.Random(slot), ctx)
        assert TRACE.match(spec.trace) and spec.question and spec.answer
