"""One record per model family: what a published checkpoint must declare and what the code needs to know.

Each family module (``qwen2_5_vl``, ``qwen3_vl``, ``qwen3_5``, ``glm46v``, ``llava_onevision``) defines its
``SPEC``; ``sparsectx.models.families`` finds the modules and registers them once, so adding a family is one
module (docs/families.md). Everything that used to be a scattered dict or a ``family ==`` branch (adapter
class, vision layout, image processor, image marker, video layout, tiling, the chat template's thinking switch,
the vision FLOPs formula, whether in-LLM pruning can run) is a field here. A checkpoint is matched by its
``config.json``: its ``model_type`` picks the family (several names may share one, e.g. GLM-4.6V-Flash declares
``glm4v``, the GLM-4.1V class that transformers 5.17's ``Glm46VForConditionalGeneration`` subclasses without
change, see ``transformers/models/glm46v/modular_glm46v.py``), and its ``architectures`` must be one the
family's adapter serves. ``docs/families.md`` tabulates the records with their sources. Each record also says
how its published ``config.json`` shrinks to the rehearsal's tiny random-weight instance
(``sparsectx.rehearsal.checkpoints``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from transformers import PretrainedConfig, PreTrainedModel

from sparsectx.models.adapter import VLMAdapter


@dataclass(frozen=True)
class FamilySpec:
    """What the rest of the code needs to know about one model family."""

    name: str
    """The family's key: ``adapter.family``, ``processor.family``, result records."""
    model_types: tuple[str, ...]
    """``config.json`` ``model_type`` values this family accepts (the first is the transformers class's own)."""
    architectures: tuple[str, ...]
    """``config.json`` ``architectures`` entries the adapter serves (transformers 5.17 class names)."""
    adapter: Callable[[PreTrainedModel, int], VLMAdapter]
    """Builds the family's adapter from an HF model and ``model.signal_chunk``."""
    special_tokens: Mapping[int, str]
    """The published tokenizer's special tokens that its checkpoints' ``config.json`` token ids and chat template
    name, by id (as its ``tokenizer_config.json`` ``added_tokens_decoder`` declares them; the copies kept in
    ``assets/published`` omit that block). The rehearsal's stand-in tokenizer carries them and remaps the ids."""
    tiny_config: Callable[[dict[str, Any]], dict[str, Any]]
    """Published ``config.json`` -> the rehearsal's tiny one, in the same layout: widths and depths shrunk, the
    published geometry (patch, merge, window, image size) kept and its layer pattern kept in miniature. Token
    ids and ``vocab_size`` are the caller's (they follow the stand-in tokenizer)."""
    image_processors: Mapping[str, type] = field(default_factory=dict)
    """``image_processor_type`` base names (a trailing ``Fast`` or ``Pil`` dropped) -> the PIL class used. The
    first entry is used when the checkpoint names none."""
    image_marker: str = "<|image_pad|>"
    """The one-per-image token the chat template renders for an image part (expanded per visual token)."""
    video_layout: str | None = None
    """How its prompts hold a video (``sparsectx.models.video_input``); None = no video path."""
    thinking_switch: str | None = None
    """The chat-template variable that turns thinking on/off (``model.thinking``); None = the family's
    published templates have none."""
    thinking_tags: tuple[str, str] = ("<think>", "</think>")
    """The open and close tags of a thinking block, as the family's templates write them."""
    tiled: bool = False
    """Any-resolution tiles plus a base view (``model.tile_budget`` applies; no pixel cap)."""
    temporal_in_pixel_bounds: bool = False
    """The image processor's ``size`` bounds count both temporal copies of a still image (GLM's
    ``smart_resize(num_frames=temporal_patch_size, ...)`` compares t*h*w with them, transformers 5.17
    ``models/glm4v/image_processing_pil_glm4v.py``), so a token cap doubles in pixels."""
    vision_flops: Callable[[PretrainedConfig, Sequence[tuple[int, int, int]]], float] | None = None
    """The vision tower's and merger's FLOPs on images of patch grids (t, h, w), from its ``vision_config``
    alone (the efficiency mode's ``sparsectx.eval.costs.vision_flops``; Qwen-style towers share
    ``sparsectx.models.vision_costs``); None = no formula, ``mode=efficiency`` is refused on the family."""
    in_llm_unsupported: str | None = None
    """Why in-LLM pruners (``pruner.stage: llm``) cannot run on the family, as the refusal states it; None = they
    can. ``PrunerConfig.check_model`` refuses such a pruner before the model loads, naming the pre-LLM pruners
    of the registry; the family's adapter refuses it too (``in_llm_refusal``)."""
    source: str = ""
    """Where the record's facts were checked (published files, transformers source)."""

    def in_llm_refusal(self, layer: int, instead: str = "a pre-LLM pruner (pruner.stage=pre_llm)") -> ValueError:
        """Returns the config error an in-LLM pruner before decoder layer ``layer`` meets on this family, with
        the reason (``in_llm_unsupported``) and what to choose ``instead``."""
        return ValueError(
            f"pruner.stage=llm (pruner.layer={layer}) is not supported on model family {self.name!r}: "
            f"{self.in_llm_unsupported}; choose {instead}"
        )

    def image_processor_class(self, declared: str | None, where: str) -> type:
        """Returns the PIL image processor class for a checkpoint's declared ``image_processor_type``.

        Raises:
            ValueError: ``declared`` is not a processor this family's adapter reads (naming ``where``).
        """
        if declared is None:
            return next(iter(self.image_processors.values()))
        base = declared.removesuffix("Fast").removesuffix("Pil")
        if base not in self.image_processors:
            raise ValueError(
                f"{where}: image_processor_type {declared!r} is not one family {self.name!r} reads "
                f"(accepted: {sorted(self.image_processors)}); is the folder's config.json model_type right?"
            )
        return self.image_processors[base]


TINY_DECODER_LAYERS = 4
"""Decoder layers of a tiny instance with no layer pattern of its own to keep: FastV and DART prune before layer
K = 2 (conf/pruner/fastv.yaml, dart.yaml) and need layers after it, as EPIC's layer schedules do."""


def tiny_decoder(
    text: dict[str, Any], heads: int, kv_heads: int, layers: int = TINY_DECODER_LAYERS, **extra: Any
) -> None:
    """Shrinks a published ``text_config`` in place to a tiny instance's decoder: width 64, MLP 128, ``layers``
    layers of ``heads`` query and ``kv_heads`` key/value heads, plus the family's own ``extra`` keys."""
    text.update(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        **extra,
    )


def scaled_sections(sections: Sequence[int], pairs: int) -> list[int]:
    """Returns M-RoPE ``sections`` rescaled to sum to ``pairs`` (the rotary frequency pairs of a shrunk head), each
    in its published proportion, rounded by largest remainder so the sum is exact (the decoder splits its rotary
    dimensions by these)."""
    total = sum(sections)
    exact = [section * pairs / total for section in sections]
    scaled = [int(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: scaled[i] - exact[i])
    for i in by_remainder[: pairs - sum(scaled)]:
        scaled[i] += 1
    return scaled


def periodic_miniature(indexes: Sequence[int], depth: int, period: int) -> tuple[list[int], int]:
    """Returns (block indexes, depth) of a tower whose published periods (``indexes[0] + 1`` blocks each, every
    index the last block of its period) shrink to ``period`` blocks: as many periods, the same ones marked.

    Raises:
        ValueError: an index does not end a period of the published spacing, or ``depth`` is not whole periods.
    """
    published = indexes[0] + 1
    if depth % published or any((i + 1) % published for i in indexes):
        raise ValueError(
            f"block indexes {list(indexes)} of a {depth}-block tower are not evenly spaced period ends; "
            "the family's tiny_config needs its own miniature of this pattern"
        )
    return [(i + 1) // published * period - 1 for i in indexes], depth // published * period


class FamilyRegistry:
    """The registered family records by name, looked up by a checkpoint's ``model_type``."""

    def __init__(self, not_yet: Mapping[str, str]) -> None:
        self._entries: dict[str, FamilySpec] = {}
        self.not_yet = dict(not_yet)
        """Known checkpoint ``model_type`` values without an adapter, with the reason."""

    def register(self, spec: FamilySpec) -> FamilySpec:
        """Returns ``spec`` after registering it; a name or model_type registered twice raises ValueError."""
        if spec.name in self._entries:
            raise ValueError(f"model family {spec.name!r} is registered twice")
        for model_type in spec.model_types:
            if model_type in self.model_types():
                owner = self.for_model_type(model_type).name
                raise ValueError(f"model_type {model_type!r} is claimed by families {owner!r} and {spec.name!r}")
        self._entries[spec.name] = spec
        return spec

    def names(self) -> list[str]:
        """Returns the registered family names, sorted."""
        return sorted(self._entries)

    def model_types(self) -> list[str]:
        """Returns every accepted ``model_type``, sorted."""
        return sorted(model_type for spec in self for model_type in spec.model_types)

    def __iter__(self):  # noqa: ANN204
        return iter(self._entries.values())

    def by_name(self, name: str) -> FamilySpec:
        """Returns the family called ``name``; raises KeyError naming the registered ones."""
        if name not in self._entries:
            raise KeyError(f"no model family {name!r}; registered: {', '.join(self.names())}")
        return self._entries[name]

    def for_model_type(self, model_type: str) -> FamilySpec:
        """Returns the family accepting ``model_type``; raises KeyError naming the supported model_types."""
        for spec in self:
            if model_type in spec.model_types:
                return spec
        reason = f" ({self.not_yet[model_type]})" if model_type in self.not_yet else ""
        raise KeyError(
            f"model family {model_type!r} has no adapter{reason}; supported: {', '.join(self.names())} "
            f"(model_types {', '.join(self.model_types())})"
        )

    def for_config(self, config: Mapping, where: str) -> FamilySpec:
        """Returns the family of a parsed ``config.json``; raises KeyError naming ``where`` when its model_type
        or architectures are not served."""
        model_type = config.get("model_type")
        if model_type is None:
            raise KeyError(f"{where}: config.json has no model_type")
        try:
            spec = self.for_model_type(model_type)
        except KeyError as err:
            raise KeyError(f"{where}: {err.args[0]}") from err
        declared = config.get("architectures") or []
        unknown = [arch for arch in declared if arch not in spec.architectures]
        if unknown:
            raise KeyError(
                f"{where}: config.json architectures {unknown} are not served by family {spec.name!r} "
                f"(model_type {model_type!r}); the adapter reads {list(spec.architectures)}"
            )
        return spec


FAMILIES = FamilyRegistry(
    not_yet={
        "llavaonevision1_5": "LLaVA-OneVision-1.5 has no class in transformers 5.17, only remote code; "
        "conf/model/llava_onevision_qwen2_7b.yaml is the llava_onevision stand-in",
    }
)
"""The registry of family records, filled by ``sparsectx.models.families`` (which imports every family module)."""

PROCESSOR_ONLY_FAMILY = "qwen2_5_vl"
"""The family of a folder without config.json (a processor saved alone): the shipped tiny model's."""
