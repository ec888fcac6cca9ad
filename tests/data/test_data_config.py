"""conf/build_data.yaml and conf/data/*.yaml compose into the checked schema; bad values fail loudly."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, ValidationError

from sparsectx.data.build import load_build_config
from sparsectx.data.config import TRAIN_ONLY_FAMILIES
from sparsectx.data.families import FAMILIES

from .conftest import BENCHES, CONF_DIR, compose_build


@pytest.mark.parametrize("suite", sorted(path.stem for path in (CONF_DIR / "data").glob("*.yaml")))
def test_every_data_preset_composes_and_validates(suite: str) -> None:
    cfg = load_build_config(compose_build([f"data={suite}"]))
    assert cfg.data.name == suite
    assert set(cfg.data.benches) >= set(BENCHES)
    assert cfg.processor.vocab_size <= 1024


def test_family_registry_matches_the_config_schema() -> None:
    cfg = load_build_config(compose_build([]))
    assert set(FAMILIES.names()) == set(vars(cfg.data.families))
    assert set(cfg.data.train.family_weights) == set(FAMILIES.names())
    assert set(FAMILIES.names()) >= TRAIN_ONLY_FAMILIES


def test_unknown_key_is_an_error() -> None:
    with pytest.raises(ConfigCompositionException):
        compose_build(["data.scene.colour_count=3"])


def test_added_key_is_refused_by_the_schema() -> None:
    # "+key=value" gets past Hydra's struct mode; the schema merge must still refuse it.
    cfg = compose_build(["+data.scene.colour_count=3"])
    with pytest.raises(ConfigKeyError):
        load_build_config(cfg)


def test_benchmark_may_not_use_a_training_only_family() -> None:
    with pytest.raises(ValueError, match="training-only"):
        load_build_config(compose_build(["data.benches.syn_count.family=describe"]))


def test_seed_is_required() -> None:
    with pytest.raises((MissingMandatoryValue, ValidationError, ValueError)):
        load_build_config(compose_build(["data.seed=null"]))


def test_bad_ranges_name_the_key() -> None:
    with pytest.raises(ValueError, match="data.families.count.count"):
        load_build_config(compose_build(["data.families.count.count=[5,2]"]))
    with pytest.raises(ValueError, match="processor.vocab_size"):
        load_build_config(compose_build(["processor.vocab_size=4096"]))
