"""``sparsectx.redact``: what every recorded copy of a config (result JSON, ``config.yaml``, ``meta.json``, the W&B
config) and every judge error message hides: URL userinfo, credential query parameters, and the value of any key
named like a secret; everything else, the run key's hash included, stays as it was."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from training.test_loop_support import METHODS, compose_train

from sparsectx.hashing import config_hash
from sparsectx.redact import REDACTED, redact, redact_text, redact_url
from sparsectx.training.config import run_defining


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("https://user:tok@host/v1", "https://<redacted>@host/v1"),
        ("https://tok@host:8443/v1", "https://<redacted>@host:8443/v1"),
        ("https://host/v1?key=abc&route=a", "https://host/v1?key=<redacted>&route=a"),
        (
            "https://host/v1?route=a&API_KEY=abc&access_token=x&sig=y",
            "https://host/v1?route=a&API_KEY=<redacted>&access_token=<redacted>&sig=<redacted>",
        ),
        ("http://u:p@127.0.0.1:8000/v1?token=t#frag", "http://<redacted>@127.0.0.1:8000/v1?token=<redacted>#frag"),
        ("https://host/v1?route=a&keys=3", "https://host/v1?route=a&keys=3"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("/data/models/a@b?key=1", "/data/models/a@b?key=1"),
    ],
)
def test_urls_lose_their_credentials_only(url: str, redacted: str) -> None:
    assert redact_url(url) == redacted
    assert redact_url(redacted) == redacted  # idempotent: a recorded copy redacted again is unchanged


def test_urls_inside_text_are_redacted() -> None:
    text = "the judge endpoint https://u:secret@host/v1/chat/completions?key=k gave no reply (timed out)"
    assert redact_text(text) == (
        "the judge endpoint https://<redacted>@host/v1/chat/completions?key=<redacted> gave no reply (timed out)"
    )


def test_secret_named_keys_and_urls_are_redacted_at_any_depth() -> None:
    config = {
        "method": {"rl": {"reward": {"params": {"judge": {"base_url": "https://u:p@h/v1", "api_key_env": "MY_KEY"}}}}},
        "logger": {"api_key": "k1", "tags": ["x", "https://h/?token=t"], "password": None},
        "hf_token": "k2",
        "model": {"image_token": "<|image_pad|>", "max_new_tokens": 16, "path": "/models/qwen"},
        "method.rl.reward.params.judge.client_secret": "k3",
    }
    out = redact(config)
    assert out["method"]["rl"]["reward"]["params"]["judge"] == {
        "base_url": "https://<redacted>@h/v1",
        "api_key_env": "MY_KEY",  # the variable's name, not its value
    }
    assert out["logger"] == {"api_key": REDACTED, "tags": ["x", "https://h/?token=<redacted>"], "password": None}
    assert out["hf_token"] == REDACTED and out["method.rl.reward.params.judge.client_secret"] == REDACTED
    assert out["model"] == config["model"]  # look-alike names are no secrets
    assert config["hf_token"] == "k2"  # the input is not changed
    assert redact(out) == out


@pytest.mark.parametrize("method", METHODS)
def test_no_shipped_training_preset_is_changed_so_recorded_copies_match_the_hashed_config(method: str) -> None:
    resolved = OmegaConf.to_container(compose_train([f"method={method}"]), resolve=True)
    assert redact(resolved) == resolved
    assert config_hash(run_defining(redact(resolved))) == config_hash(run_defining(resolved))
