"""The helpers behind the one-line answers (``sparsectx.cli``): which keys are closest to a typo, and which
errors count as config errors."""

from __future__ import annotations

import pytest

from sparsectx.cli import ConfigError, closest_keys, config_check


def test_closest_keys_match_the_whole_path_or_its_last_part() -> None:
    keys = ["budget", "seed", "method", "method.teacher", "method.teacher.ema_decay", "efficiency.budgets"]
    assert closest_keys("budgte", keys)[0] == "budget"
    assert closest_keys("ema_decay", keys)[0] == "method.teacher.ema_decay"
    assert closest_keys("efficiency.budget", keys)[0] == "efficiency.budgets"  # not the top-level budget
    assert closest_keys("zzz", keys) == []


def test_config_check_turns_value_errors_into_config_errors_and_nothing_else() -> None:
    with pytest.raises(ConfigError, match="size=0"), config_check():
        raise ValueError("size=0 must be >= 1")
    with pytest.raises(RuntimeError), config_check():
        raise RuntimeError("a bug")
