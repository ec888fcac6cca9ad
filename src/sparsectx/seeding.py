"""Every random stream's seed: one root seed (``seed`` / ``data.seed``) and the stream's labels.

Training (its order, init, schedules, pruner masks), evaluation (a random pruner's mask, Pass@K's draws),
pretraining's stream and the synthetic suite's items all derive their seeds here, so one rule makes every
stream and a stream never depends on another stream's draws.
"""

from __future__ import annotations

import hashlib


def derive_seed(seed: int, *labels: str | int) -> int:
    """Returns the 63-bit seed of one random stream: sha256 of the root seed and the stream's labels.

    This is the only place a stage, split or item seed is made. ``derive_seed(s, "syn_count", 7)`` is
    item 7 of ``syn_count``; ``derive_seed(s, "train", "pick", 7)`` picks the family of training item 7.
    """
    if seed is None or isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed={seed!r} must be an int (data.seed)")
    text = ":".join(str(part) for part in (seed, *labels))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1
