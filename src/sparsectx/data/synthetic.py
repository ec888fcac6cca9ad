"""The seeded synthetic suite: benchmark files ``<bench>.tsv`` and a disjoint ``train.tsv``.

Every item has its own random stream, ``derive_seed(seed, split, n)``, so an item does not depend on
the items before it or on the file's size, and the same config gives byte-identical files.
A training item whose content hash (image pixels + question) equals any benchmark item's is dropped
and counted, so the training split is disjoint from every benchmark split.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path

from sparsectx.data.config import SuiteConfig
from sparsectx.data.families import FAMILIES, FamilyContext, ItemSpec
from sparsectx.data.prompt import format_question
from sparsectx.data.render import encode_png, pixel_hash, render_image
from sparsectx.data.scenes import PlacementError
from sparsectx.data.tsv import Item, content_hash, write_tsv
from sparsectx.seeding import derive_seed

log = logging.getLogger(__name__)

TRAIN_SPLIT = "train"
# A training item's balanced-design slot is drawn from one full period of every family's design
# (detail 2, spatial 4, POPE 6, MCQ 12).
SLOT_PERIOD = 12


def family_context(cfg: SuiteConfig) -> FamilyContext:
    """Returns the shared inputs of every family, with POPE's pair popularity fixed by ``cfg.seed``."""
    pairs = [(color, shape) for color in cfg.scene.colors for shape in cfg.scene.shapes]
    random.Random(derive_seed(cfg.seed, "pope-popularity")).shuffle(pairs)
    return FamilyContext(scene=cfg.scene, families=cfg.families, popularity=tuple(pairs))


def generate_spec(family: str, slot: int, rng: random.Random, ctx: FamilyContext) -> ItemSpec:
    """Returns one item of ``family``, redrawing the scene while placement fails.

    Raises:
        RuntimeError: every one of ``scene.placement_tries`` scenes failed (the config packs too much).
    """
    make = FAMILIES.get(family)
    for _ in range(ctx.scene.placement_tries):
        try:
            return make(rng, slot, ctx)
        except PlacementError:
            continue
    raise RuntimeError(
        f"family {family!r}: no scene could be placed in {ctx.scene.placement_tries} tries; "
        "lower the object counts or sizes under data.families / data.scene"
    )


def to_item(spec: ItemSpec, index: int, family: str, cfg: SuiteConfig) -> tuple[Item, str]:
    """Returns the item with its image drawn and PNG-encoded, and its content hash."""
    image = render_image(spec.scene, cfg.scene.colors, cfg.scene.background)
    item = Item(
        index=index,
        image_bytes=encode_png(image),
        question=spec.question,
        options=dict(spec.options),
        answer=spec.answer,
        category=spec.category,
        family=family,
        subset=spec.subset,
        trace=spec.trace,
        scene=spec.scene.to_json(),
        extra={},
    )
    return item, content_hash(pixel_hash(image), spec.question)


def generate_bench(cfg: SuiteConfig, bench: str) -> tuple[list[Item], set[str]]:
    """Returns the items of ``bench`` (row n: slot n, stream ``(seed, bench, n)``) and their hashes."""
    spec = cfg.benches[bench]
    ctx = family_context(cfg)
    items, hashes = [], set()
    for n in range(spec.size):
        rng = random.Random(derive_seed(cfg.seed, bench, n))
        item, digest = to_item(generate_spec(spec.family, n, rng, ctx), n, spec.family, cfg)
        items.append(item)
        hashes.add(digest)
    return items, hashes


def generate_train(cfg: SuiteConfig, exclude: set[str]) -> tuple[list[Item], int]:
    """Returns ``cfg.train.size`` training items whose hashes avoid ``exclude``, and how many were dropped.

    Draw n picks a family by ``train.family_weights`` and a slot from stream ``(seed, "train", "pick", n)``
    and builds the item from stream ``(seed, "train", n)``.
    """
    ctx = family_context(cfg)
    names = list(cfg.train.family_weights)
    weights = [cfg.train.family_weights[name] for name in names]
    items: list[Item] = []
    dropped = 0
    draw = 0
    while len(items) < cfg.train.size:
        if dropped > cfg.train.size:
            raise RuntimeError(f"{dropped} training items collided with benchmark items; is data.seed shared?")
        pick = random.Random(derive_seed(cfg.seed, TRAIN_SPLIT, "pick", draw))
        family, slot = pick.choices(names, weights=weights)[0], pick.randrange(SLOT_PERIOD)
        rng = random.Random(derive_seed(cfg.seed, TRAIN_SPLIT, draw))
        item, digest = to_item(generate_spec(family, slot, rng, ctx), len(items), family, cfg)
        draw += 1
        if digest in exclude:
            dropped += 1
            log.warning("training draw %d (%s) equals a benchmark item; dropped", draw - 1, family)
            continue
        items.append(item)
    return items, dropped


@dataclass(frozen=True)
class SuiteReport:
    """What ``build_suite`` wrote."""

    files: dict[str, Path]
    """Split name (bench name or "train") -> TSV path."""
    sizes: dict[str, int]
    """Split name -> rows written."""
    train_dropped: int
    """Training draws dropped because they equal a benchmark item."""


def build_suite(cfg: SuiteConfig) -> SuiteReport:
    """Returns a report after writing ``<out_dir>/<bench>.tsv`` for each bench and ``<out_dir>/train.tsv``."""
    out_dir = Path(cfg.out_dir)
    files, sizes, bench_hashes = {}, {}, set()
    for bench in cfg.benches:
        items, hashes = generate_bench(cfg, bench)
        files[bench] = out_dir / f"{bench}.tsv"
        write_tsv(files[bench], items)
        sizes[bench] = len(items)
        bench_hashes |= hashes
        log.info("wrote %s (%d items)", files[bench], len(items))
    train, dropped = generate_train(cfg, bench_hashes)
    files[TRAIN_SPLIT] = out_dir / f"{TRAIN_SPLIT}.tsv"
    write_tsv(files[TRAIN_SPLIT], train)
    sizes[TRAIN_SPLIT] = len(train)
    log.info("wrote %s (%d items, %d dropped as benchmark duplicates)", files[TRAIN_SPLIT], len(train), dropped)
    return SuiteReport(files=files, sizes=sizes, train_dropped=dropped)


def corpus_pairs(cfg: SuiteConfig, per_family: int) -> list[tuple[str, str]]:
    """Returns (question as shown to the model, reference trace) for ``per_family`` items of every family.

    Uses its own streams ``(seed, "corpus", family, n)`` and draws no images: the same text distribution
    as the files, cheaply. The tokenizer is trained on these texts.
    """
    ctx = family_context(cfg)
    pairs = []
    for family in FAMILIES.names():
        for n in range(per_family):
            rng = random.Random(derive_seed(cfg.seed, "corpus", family, n))
            spec = generate_spec(family, n, rng, ctx)
            pairs.append((format_question(spec.question, spec.options, cfg.prompt.mcq_hint), spec.trace))
    return pairs
