"""Typed schema of a training-set recipe (``conf/data/sources/*.yaml``, the ``training_set`` key).

Every field is required: the YAML is the single source of values. ``TrainingSetConfig.__post_init__``
checks each source's layout, its field names and the quotas against the batch geometry, so a recipe that
cannot produce its file fails before any row is read.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparsectx.checks import check_choice

FORMATS = ("json", "jsonl", "parquet")
"""``json``: one array of row objects (LLaVA's ``llava_v1_5_mix665k.json``); ``jsonl``: one object per line
(LLaVA-CoT-100k's ``train.jsonl``); ``parquet``: a Hugging Face datasets shard (read with pyarrow)."""

LAYOUTS = ("conversations", "fields")
"""``conversations``: LLaVA's ``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}``,
the first user turn is the question and the first assistant turn after it the response; ``fields``: the
question and the response are columns of the row (PixMo, OneThinker)."""

ANSWER_STYLES = ("plain", "think_answer", "llava_cot_tags")
"""How the response text becomes ``answer`` and ``trace`` (see ``sparsectx.data.sources.rows``)."""

LAYOUT_FIELDS = {
    "conversations": ("id", "image", "conversations", "speaker", "text", "user", "assistant"),
    "fields": ("id", "image", "question", "answer", "trace"),
}
"""The keys ``SourceConfig.fields`` must have for each layout. ``id`` and ``trace`` may map to "" (no such
column: the row's position is its id, there is no separate trace)."""

OPTIONAL_FIELDS = frozenset({"id", "trace"})


@dataclass
class SourceConfig:
    """One downloaded dataset: where its rows and images are, how to read a row, and how many to draw."""

    files: list[str]
    """Row files, or glob patterns (``data/raw/pixmo/*.parquet``), read in sorted-path order."""
    format: str
    """One of ``FORMATS``."""
    layout: str
    """One of ``LAYOUTS``."""
    fields: dict[str, str]
    """Role -> the row's key for it: exactly ``LAYOUT_FIELDS[layout]`` (for ``conversations``, ``speaker``
    and ``text`` are the turn's keys and ``user``/``assistant`` the speaker values)."""
    where: dict[str, str]
    """Field -> required value; other rows are filtered (counted, not budgeted). OneThinker mixes image and
    video rows: ``{data_type: image}``. Empty: every row."""
    image_root: str
    """Folder that relative image paths resolve against; "" when the rows embed their images."""
    image_template: str
    """The image cell's value -> path under ``image_root``, with ``{}`` for the value (``"{}"``: the cell is
    the path; PixMo names images by their sha256)."""
    image_token: str
    """Placeholder removed from the question (LLaVA's ``<image>``); "" for none."""
    sha256_field: str
    """Row key holding the hex sha256 of the image file (PixMo's ``image_sha256``, published so that fetched
    images can be checked against the annotated ones): a mismatch is a dropped row. "" = no check."""
    answer_style: str
    """One of ``ANSWER_STYLES``."""
    quota: int
    """Rows drawn from this source (LT-14K: the source's share of 14,000)."""
    seed: int
    """Seed of this source's draw (LT-OPD App. A: 20260830 for Vision-OPD, 20260824 for the rest)."""

    def check(self, key: str) -> None:
        """Returns None; raises ValueError naming ``key.<field>`` for a bad format, layout, field map or quota."""
        check_choice(self.format, FORMATS, f"{key}.format")
        check_choice(self.layout, LAYOUTS, f"{key}.layout")
        check_choice(self.answer_style, ANSWER_STYLES, f"{key}.answer_style")
        expected = set(LAYOUT_FIELDS[self.layout])
        if set(self.fields) != expected:
            raise ValueError(
                f"{key}.fields has keys {sorted(self.fields)}; layout {self.layout!r} needs exactly {sorted(expected)}"
            )
        empty = [name for name, column in self.fields.items() if not column and name not in OPTIONAL_FIELDS]
        if empty:
            raise ValueError(f"{key}.fields: {empty} must name a key of the row (only id and trace may be '')")
        if not self.files:
            raise ValueError(f"{key}.files is empty; list the downloaded row files (or glob patterns)")
        if "{}" not in self.image_template:
            raise ValueError(f"{key}.image_template={self.image_template!r} must contain {{}} for the cell value")
        if self.quota < 1:
            raise ValueError(f"{key}.quota={self.quota} must be >= 1")
        if self.seed is None or isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"{key}.seed={self.seed!r} must be an int")


@dataclass
class TrainingSetConfig:
    """A training file drawn from downloaded datasets: its sources, quotas, batch geometry and skip budget."""

    name: str
    """Recipe name; equals the YAML stem under conf/data/sources/."""
    out_path: str
    """The TSV written (what ``train_data.path`` of the matching experiment reads)."""
    batch_size: int | None
    """Rows per batch of the balanced sampler (LT-14K: 80); null = no batches, one source's draw in order."""
    num_batches: int | None
    """Batches (LT-14K: 175); the quotas must sum to ``batch_size * num_batches``. Null with ``batch_size``."""
    skip_budget: int
    """Most rows dropped for a problem (malformed row, missing or undecodable image) before the build stops
    with an error naming the file and the row. Rows filtered by design (text-only, several images, ``where``)
    are counted but not budgeted."""
    min_image_side: int
    """Smallest image width or height accepted (our choice: one merged patch, 28 px for 14-px patches with
    merge 2; the processor would upsample a smaller image, inventing the detail a pruner then selects)."""
    max_aspect_ratio: float
    """Largest long-side / short-side ratio accepted: transformers' Qwen2-VL ``smart_resize`` (the image
    processor of the Qwen2.5-VL, Qwen3-VL and Qwen3.5 checkpoints; GLM-4.6V's has the same check) raises
    above 200."""
    sources: dict[str, SourceConfig]
    """Source name (written to the ``category`` column) -> its reading recipe, in sampler tie-break order."""

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("training_set.sources is empty; name at least one downloaded dataset")
        for name, source in self.sources.items():
            source.check(f"training_set.sources.{name}")
        if self.skip_budget < 0:
            raise ValueError(f"training_set.skip_budget={self.skip_budget} must be >= 0")
        if self.min_image_side < 1:
            raise ValueError(f"training_set.min_image_side={self.min_image_side} must be >= 1")
        if self.max_aspect_ratio < 1:
            raise ValueError(f"training_set.max_aspect_ratio={self.max_aspect_ratio} must be >= 1")
        total = sum(source.quota for source in self.sources.values())
        if (self.batch_size is None) != (self.num_batches is None):
            raise ValueError(
                f"training_set.batch_size={self.batch_size} and training_set.num_batches={self.num_batches}: "
                "set both (a balanced sampler) or neither"
            )
        if self.batch_size is not None and self.num_batches is not None:
            if self.batch_size < 1 or self.num_batches < 1 or self.batch_size * self.num_batches != total:
                raise ValueError(
                    f"training_set: the quotas sum to {total}, but batch_size={self.batch_size} x "
                    f"num_batches={self.num_batches} = {self.batch_size * self.num_batches}; make them equal"
                )
        elif len(self.sources) > 1:
            raise ValueError(
                f"training_set has {len(self.sources)} sources but no batch_size/num_batches; a mixture needs "
                "the balanced sampler's batch geometry"
            )
