"""``python -m sparsectx.protocol experiment=<preset> [out=<file>]``: prints (or writes) a study's protocol card."""

from __future__ import annotations

import sys
from pathlib import Path

from sparsectx.io import atomic_write_text
from sparsectx.protocol.record import protocols
from sparsectx.protocol.study import card_markdown, study_card


def main(argv: list[str]) -> int:
    """Returns the exit status after printing or writing the card of ``experiment=<preset>``."""
    args = dict(a.split("=", 1) for a in argv if "=" in a)
    unknown = sorted(set(args) - {"experiment", "out"}) + [a for a in argv if "=" not in a]
    if unknown or "experiment" not in args:
        claimed = sorted(e for p in protocols() for e in p.experiments)
        print(f"usage: python -m sparsectx.protocol experiment=<one of {claimed}> [out=<file>]", file=sys.stderr)
        return 2
    card = study_card(args["experiment"])
    if card is None:
        claimed = sorted(e for p in protocols() for e in p.experiments)
        print(f"no paper record claims experiment={args['experiment']}; cards exist for {claimed}", file=sys.stderr)
        return 2
    text = card_markdown(card)
    if "out" in args:
        atomic_write_text(Path(args["out"]), text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
