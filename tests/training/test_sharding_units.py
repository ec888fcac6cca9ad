"""Which modules become FSDP units (``sharding.shard_units``): each module the adapter calls directly is one;
the vision tower and modules sharing a parameter (tied embeddings) none: they stay replicated."""

from __future__ import annotations

from torch import nn

from sparsectx.training.sharding import shard_units


class TextModel(nn.Module):
    """The parts of a HF text model the grouping looks at: layers, embeddings, norm, a parameter-free rotary."""

    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(10, 4)
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.norm = nn.LayerNorm(4)
        self.rotary_emb = nn.Identity()


class VLM(nn.Module):
    """A ``...ForConditionalGeneration`` shape: ``model.language_model``, ``model.visual`` and ``lm_head``."""

    def __init__(self, tied: bool) -> None:
        super().__init__()
        self.model = nn.Module()
        self.model.language_model = TextModel()
        self.model.visual = nn.Linear(4, 4)
        self.lm_head = nn.Linear(4, 10, bias=False)
        if tied:
            self.lm_head.weight = self.model.language_model.embed_tokens.weight


def test_every_called_module_is_a_unit_and_the_tower_none() -> None:
    model = VLM(tied=False)
    text = model.model.language_model
    units = shard_units(model, text)
    assert units == [*text.layers, text.embed_tokens, text.norm, model.lm_head]
    sharded = {id(p) for module in units for p in module.parameters()}
    assert sharded == {id(p) for p in model.parameters()} - {id(p) for p in model.model.visual.parameters()}


def test_tied_embeddings_stay_replicated() -> None:
    model = VLM(tied=True)
    text = model.model.language_model
    assert shard_units(model, text) == [*text.layers, text.norm]
