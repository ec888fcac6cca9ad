"""A study's protocol card from its experiment preset: every job composed as the DAG runs it, then compared."""

from __future__ import annotations

from sparsectx.protocol.card import Card, build_card, render_card
from sparsectx.protocol.record import protocol_of
from sparsectx.protocol.settings import composer, study_jobs
from sparsectx.workflow import Grid, load_grid

CARD_COMMAND = "python -m sparsectx.protocol experiment={experiment}"
"""The command the card names as its maker."""

CARD_FILE = "protocol.md"
"""The card's file name beside a study's tables."""


def study_card(experiment: str, grid: Grid | None = None) -> Card | None:
    """Returns the protocol card of ``experiment`` (None when no paper record claims the preset); ``grid``
    replaces the preset's own (make_tables passes the grid it renders)."""
    protocol = protocol_of(experiment)
    if protocol is None:
        return None
    grid = grid if grid is not None else load_grid(experiment)
    with composer() as compose:
        jobs = study_jobs(grid, compose)
    return build_card(experiment, protocol, jobs)


def card_markdown(card: Card) -> str:
    """Returns the card as Markdown, naming the command that makes it."""
    return render_card(card, CARD_COMMAND.format(experiment=card.experiment))
