"""The deterministic balanced sampler: which rows each source contributes, and where they sit in the file.

LT-OPD (seed 000, App. A "Training mixture") states only: "A deterministic balanced sampler realizes these
quotas over 175 batches of 80 questions. The Vision-OPD source uses sampling seed 20260830; the remaining
sources use 20260824." The rule below is our transcription of that sentence (the authors' code is not
public, so the exact rule is unverified):

1. Draw: each source's usable rows, in file order, are permuted by ``random.Random(source.seed)``; rows are
   taken in that order until the quota is met, a row whose image fails its check being replaced by the
   next one (``draw_order``).
2. Balance: the file is the sequence of ``batch_size * num_batches`` slots in which slot p goes to the
   source whose share is furthest behind its target ``quota * (p + 1) / total`` (ties: the source listed
   first), and each source's drawn rows fill its slots in draw order (``interleave``). Every prefix of the
   file then holds each source's proportional share to within one row, each source has exactly its quota
   in all, and a quota that is a multiple of ``num_batches`` puts exactly ``quota / num_batches`` rows of
   that source in every batch of ``batch_size`` consecutive rows.
"""

from __future__ import annotations

import random
from fractions import Fraction


def draw_order(count: int, seed: int) -> list[int]:
    """Returns the order in which a source's ``count`` usable rows are drawn: a permutation from ``seed``.

    Python's ``random.Random`` (Mersenne Twister) with an int seed gives the same permutation on every
    platform and Python release since 3.2.
    """
    order = list(range(count))
    random.Random(seed).shuffle(order)
    return order


def interleave(quotas: dict[str, int]) -> list[str]:
    """Returns the source of every slot of the file, ``sum(quotas)`` long (rule 2 of the module docstring).

    Exact arithmetic (``Fraction``) keeps ties and the final counts free of rounding: at the last slot every
    target is an integer and every deficit is above -1, so each source ends with exactly its quota.
    """
    total = sum(quotas.values())
    names = list(quotas)
    taken = dict.fromkeys(names, 0)
    slots = []
    for position in range(total):
        deficits = {name: Fraction(quotas[name] * (position + 1), total) - taken[name] for name in names}
        best = max(names, key=lambda name: (deficits[name], -names.index(name)))
        taken[best] += 1
        slots.append(best)
    return slots
