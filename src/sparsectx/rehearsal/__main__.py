"""``python -m sparsectx.rehearsal experiment=<preset> [cores=2] [targets=all_tables] [workdir=<dir>]
[grid_file=<yaml>]``: rehearses a real preset.

Every job of the preset runs at miniature scale in ``rehearsal/<preset>/`` (``sparsectx.rehearsal.run``); the
exit status is the pipeline's. ``make rehearse EXPERIMENT=<preset>`` runs this.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sparsectx.rehearsal.run import rehearse

USAGE = (
    "usage: python -m sparsectx.rehearsal experiment=<preset> [cores=<n>] [targets=<rule>,<rule>...] "
    "[workdir=<dir>] [grid_file=<yaml with a grid: mapping>]"
)


def main(argv: list[str]) -> int:
    """Returns the exit status of the rehearsal ``argv`` names (2 on a bad command line)."""
    args = dict(a.split("=", 1) for a in argv if "=" in a)
    known = {"experiment", "cores", "targets", "workdir", "grid_file"}
    unknown = sorted(set(args) - known) + [a for a in argv if "=" not in a]
    if unknown or "experiment" not in args or not args.get("cores", "1").isdigit():
        print(f"{USAGE}\nnot understood: {unknown or argv}", file=sys.stderr)
        return 2
    targets = [t for t in args.get("targets", "all_tables").split(",") if t]
    paths = {key: Path(args[key]) for key in ("workdir", "grid_file") if key in args}
    return rehearse(args["experiment"], int(args.get("cores", "2")), targets, **paths)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
