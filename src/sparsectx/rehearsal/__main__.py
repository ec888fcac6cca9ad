"""``python -m sparsectx.rehearsal experiment=<preset> [cores=2] [targets=all_tables]``: rehearses a real preset.

Every job of the preset runs at miniature scale in ``rehearsal/<preset>/`` (``sparsectx.rehearsal.run``); the
exit status is the pipeline's. ``make rehearse EXPERIMENT=<preset>`` runs this.
"""

from __future__ import annotations

import sys

from sparsectx.rehearsal.run import rehearse

USAGE = "usage: python -m sparsectx.rehearsal experiment=<preset> [cores=<n>] [targets=<rule>,<rule>...]"


def main(argv: list[str]) -> int:
    """Returns the exit status of the rehearsal ``argv`` names (2 on a bad command line)."""
    args = dict(a.split("=", 1) for a in argv if "=" in a)
    unknown = sorted(set(args) - {"experiment", "cores", "targets"}) + [a for a in argv if "=" not in a]
    if unknown or "experiment" not in args or not args.get("cores", "1").isdigit():
        print(f"{USAGE}\nnot understood: {unknown or argv}", file=sys.stderr)
        return 2
    targets = [t for t in args.get("targets", "all_tables").split(",") if t]
    return rehearse(args["experiment"], int(args.get("cores", "2")), targets)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
