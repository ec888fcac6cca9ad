"""Secrets and tracking on shared machines (issue 39, item 5): the judge's key goes only where the user sends it,
credentials never land in what a run records, and the environment cannot switch tracking to uploading.

- The served judge gets a key only when ``judge.api_key_env`` names its variable, only over https or to a
  loopback host over http (never through an http proxy), and never through a redirect.
- A ``base_url`` with credentials (``user:token@``, ``?api_key=``) is used, but is redacted from the result
  JSON, a training run's ``config.yaml`` and ``state/meta.json``, the W&B config and error messages; a
  resume still matches its state.
- ``WANDB_MODE=online`` in the environment is announced and ignored: only ``logger.mode=online`` uploads.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
import wandb
from eval.test_judge import _config, _leaf
from training.test_loop_support import TinyEnv, compose_train, shared_env, train_overrides

from sparsectx import tracking
from sparsectx.eval.judge import JudgeConfig, judge_result, openai_chat
from sparsectx.training import loop
from sparsectx.training.config import load_train_config

pytestmark = pytest.mark.faults
KEY = "sk-named-variable-key"
USERINFO_TOKEN = "userinfo-token-0451"
QUERY_TOKEN = "query-token-7713"


class _Recorder(BaseHTTPRequestHandler):
    """Records every request (method, path, headers); answers a judge reply, or redirects when asked to."""

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        server: Any = self.server
        server.seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers)})
        if server.redirect_to is not None:
            self.send_response(server.redirect_code)
            self.send_header("Location", server.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        reply = json.dumps({"choices": [{"message": {"content": "No"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    do_GET = do_POST = _handle  # noqa: N815 (http.server's names)

    def log_message(self, *args: object) -> None:
        return None


def _serve(redirect_to: str | None = None, redirect_code: int = 302) -> Any:
    """Returns a started 127.0.0.1 server recording its requests in ``.seen``."""
    server: Any = HTTPServer(("127.0.0.1", 0), _Recorder)
    server.seen, server.redirect_to, server.redirect_code = [], redirect_to, redirect_code
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def endpoint() -> Iterator[Any]:
    server = _serve()
    yield server
    server.shutdown()


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without proxy variables (a test sets its own)."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "no_proxy", "NO_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def _url(server: Any, credentials: str = "", query: str = "") -> str:
    return f"http://{credentials}127.0.0.1:{server.server_port}/v1{query}"


def _authorization(server: Any) -> list[str | None]:
    return [request["headers"].get("Authorization") for request in server.seen]


def test_no_key_is_sent_unless_its_variable_is_named(endpoint, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient-key-of-another-tool")
    result = _leaf(tmp_path, "pope")
    judge_result(_config(result, JudgeConfig(backend="openai", model="m", base_url=_url(endpoint))))
    assert endpoint.seen and _authorization(endpoint) == [None] * len(endpoint.seen)


def test_the_named_key_goes_to_a_loopback_endpoint(endpoint, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("SPARSECTX_TEST_JUDGE_KEY", KEY)
    judge = JudgeConfig(backend="openai", model="m", base_url=_url(endpoint), api_key_env="SPARSECTX_TEST_JUDGE_KEY")
    judge_result(_config(_leaf(tmp_path, "pope"), judge))
    assert endpoint.seen and set(_authorization(endpoint)) == {f"Bearer {KEY}"}


def test_a_named_variable_that_is_unset_is_an_error_naming_it(endpoint, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.delenv("SPARSECTX_TEST_JUDGE_KEY", raising=False)
    judge = JudgeConfig(backend="openai", model="m", base_url=_url(endpoint), api_key_env="SPARSECTX_TEST_JUDGE_KEY")
    with pytest.raises(ValueError, match=r"judge\.api_key_env=SPARSECTX_TEST_JUDGE_KEY.*not set"):
        openai_chat(judge)
    assert endpoint.seen == []


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Returns the list of attempted connections and name lookups (each is refused: no network needed)."""
    attempts: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return attempts


@pytest.mark.parametrize(
    "base_url",
    [
        "http://judge.example.com/v1",
        "http://10.1.2.3:8000/v1",
        "http://localhost.example.com/v1",
        "http://[::ffff:8.8.8.8]:8000/v1",
    ],
)
@pytest.mark.parametrize(
    "credential",
    [
        {"api_key_env": "SPARSECTX_TEST_JUDGE_KEY"},
        {"userinfo": f"judge:{USERINFO_TOKEN}@"},
        {"query": f"?key={QUERY_TOKEN}"},
    ],
)
def test_a_credential_over_plain_http_to_another_host_is_refused_before_any_request(
    base_url: str, credential: dict[str, str], connections: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARSECTX_TEST_JUDGE_KEY", KEY)
    url = base_url.replace("http://", "http://" + credential.get("userinfo", "")) + credential.get("query", "")
    with pytest.raises(ValueError, match=r"judge\.base_url.*https.*judge\.api_key_env") as refused:
        openai_chat(JudgeConfig(backend="openai", model="m", base_url=url, api_key_env=credential.get("api_key_env")))(
            "Yes or No?"
        )
    assert connections == []
    assert USERINFO_TOKEN not in str(refused.value) and QUERY_TOKEN not in str(refused.value)


@pytest.mark.parametrize(
    "base_url",
    [
        "https://judge.example.com/v1",
        "http://127.0.0.1:8000/v1",
        "http://127.8.0.1/v1",
        "http://localhost:8000/v1",
        "http://[::1]:8000/v1",
    ],
)
def test_https_and_loopback_endpoints_may_carry_the_key(base_url: str, connections: list[Any]) -> None:
    cfg = JudgeConfig(backend="openai", model="m", base_url=base_url, api_key_env="SPARSECTX_TEST_JUDGE_KEY")
    assert cfg.base_url == base_url and connections == []


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_refused_and_the_key_never_reaches_its_target(code, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    target = _serve()
    source = _serve(redirect_to=_url(target) + "/chat/completions", redirect_code=code)
    monkeypatch.setenv("SPARSECTX_TEST_JUDGE_KEY", KEY)
    result = _leaf(tmp_path, "pope")
    before = result.read_bytes()
    judge = JudgeConfig(backend="openai", model="m", base_url=_url(source), api_key_env="SPARSECTX_TEST_JUDGE_KEY")
    try:
        with pytest.raises(RuntimeError, match=rf"{_url(source)}/chat/completions .*redirect.*{_url(target)}"):
            judge_result(_config(result, judge))
    finally:
        source.shutdown()
        target.shutdown()
    assert len(source.seen) == 1 and target.seen == []
    assert result.read_bytes() == before


def test_an_http_proxy_from_the_environment_never_sees_a_loopback_key(endpoint, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    proxy = _serve()
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{proxy.server_port}")
    urllib.request.install_opener(None)  # urlopen's shared opener reads the proxy variables when first built
    monkeypatch.setenv("SPARSECTX_TEST_JUDGE_KEY", KEY)
    judge = JudgeConfig(backend="openai", model="m", base_url=_url(endpoint), api_key_env="SPARSECTX_TEST_JUDGE_KEY")
    try:
        judge_result(_config(_leaf(tmp_path, "pope"), judge))
    finally:
        proxy.shutdown()
    assert proxy.seen == [] and set(_authorization(endpoint)) == {f"Bearer {KEY}"}


def test_credentials_in_base_url_are_used_but_never_recorded(endpoint, tmp_path) -> None:  # noqa: ANN001
    result = _leaf(tmp_path, "pope")
    url = _url(endpoint, f"judge:{USERINFO_TOKEN}@", f"?api_key={QUERY_TOKEN}&route=a")
    block = judge_result(_config(result, JudgeConfig(backend="openai", model="m", base_url=url)))
    basic = "Basic " + base64.b64encode(f"judge:{USERINFO_TOKEN}".encode()).decode()
    assert endpoint.seen and set(_authorization(endpoint)) == {basic}
    assert {request["path"] for request in endpoint.seen} == {f"/v1/chat/completions?api_key={QUERY_TOKEN}&route=a"}
    written = result.read_text(encoding="utf-8")
    assert USERINFO_TOKEN not in written and QUERY_TOKEN not in written
    assert (
        block["config"]["base_url"]
        == f"http://<redacted>@127.0.0.1:{endpoint.server_port}/v1?api_key=<redacted>&route=a"
    )


def test_an_unreachable_endpoint_error_shows_no_credentials(tmp_path) -> None:  # noqa: ANN001
    judge = JudgeConfig(
        backend="openai",
        model="m",
        base_url=f"http://judge:{USERINFO_TOKEN}@127.0.0.1:9/v1?key={QUERY_TOKEN}",
        timeout_s=2,
    )
    with pytest.raises(
        RuntimeError, match=r"endpoint http://127\.0\.0\.1:9/v1/chat/completions\?key=<redacted>"
    ) as err:
        judge_result(_config(_leaf(tmp_path, "pope"), judge))
    assert USERINFO_TOKEN not in str(err.value) and QUERY_TOKEN not in str(err.value)


class _FakeRun:
    """Stands in for a W&B run: records what ``wandb.init`` was given; logs nothing."""

    id = "fake-run"

    def __init__(self, **kwargs: Any) -> None:
        self.init = kwargs

    def log(self, *args: Any, **kwargs: Any) -> None:
        return None

    def finish(self) -> None:
        return None


@pytest.fixture
def wandb_inits(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Returns the keyword arguments of every ``wandb.init`` call (a fake run: nothing leaves the machine)."""
    calls: list[dict[str, Any]] = []

    def init(**kwargs: Any) -> _FakeRun:
        calls.append(kwargs)
        return _FakeRun(**kwargs)

    monkeypatch.setattr(wandb, "init", init)
    return calls


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


def test_a_training_run_records_no_judge_credentials_and_resumes(tiny_env, endpoint, wandb_inits, tmp_path) -> None:  # noqa: ANN001
    url = _url(endpoint, f"judge:{USERINFO_TOKEN}@", f"?key={QUERY_TOKEN}")
    judge = "method.rl.reward.params.judge"
    overrides = [
        *train_overrides(tiny_env, tmp_path / "runs"),
        "method=grpo_judge",
        f"judge@{judge}=openai",
        f"{judge}.model=served",
        f"{judge}.base_url='{url}'",
        "method.rl.group_size=2",
        "logger=wandb",
        f"logger.dir={tmp_path}",
    ]
    loop.run(compose_train([*overrides, "steps=1"]))
    run_dir = next((tmp_path / "runs").glob("*/*/*/*/*"))
    loop.run(compose_train([*overrides, "steps=2"]))  # resumes from step 1: the redacted record still matches
    recorded = {
        "config.yaml": (run_dir / "config.yaml").read_text(encoding="utf-8"),
        "meta.json": (run_dir / "state" / "meta.json").read_text(encoding="utf-8"),
        "W&B config": json.dumps([call["config"] for call in wandb_inits]),
    }
    assert len(wandb_inits) == 2
    for name, text in recorded.items():
        assert USERINFO_TOKEN not in text and QUERY_TOKEN not in text, name
        assert f"127.0.0.1:{endpoint.server_port}/v1" in text, name  # the endpoint itself stays recorded


@pytest.mark.parametrize(
    ("judge_overrides", "match"),
    [
        (
            ["base_url=http://judge.example.com/v1", "api_key_env=SPARSECTX_TEST_JUDGE_KEY"],
            r"method\.rl\.reward\.params\.judge\.base_url='http://judge\.example\.com/v1' is plain http",
        ),
        (
            ["base_url=http://127.0.0.1:8000/v1", "api_key_env=SPARSECTX_UNSET_JUDGE_KEY"],
            r"method\.rl\.reward\.params\.judge\.api_key_env=SPARSECTX_UNSET_JUDGE_KEY .*not set",
        ),
    ],
)
def test_a_training_config_with_unsafe_or_missing_credentials_is_refused_at_load(
    judge_overrides: list[str], match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARSECTX_TEST_JUDGE_KEY", KEY)
    monkeypatch.delenv("SPARSECTX_UNSET_JUDGE_KEY", raising=False)
    judge = "method.rl.reward.params.judge"
    overrides = ["method=grpo_judge", f"judge@{judge}=openai", f"{judge}.model=served"]
    with pytest.raises(ValueError, match=match):
        load_train_config(compose_train([*overrides, *(f"{judge}.{o}" for o in judge_overrides)]))


def _logger(mode: str) -> tracking.LoggerConfig:
    return tracking.LoggerConfig(
        name="wandb",
        project="p",
        entity=None,
        mode=mode,
        dir="wandb",
        rollout_rows=1,
        prediction_rows=1,
        log_checkpoints=False,
    )


def test_online_in_the_environment_is_announced_and_does_not_upload(wandb_inits, tmp_path, monkeypatch, caplog) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "online")
    with caplog.at_level(logging.WARNING, logger="sparsectx.tracking"):
        tracking.start_run(_logger("offline"), "run", "exp", "evaluate", [], {"k": 1})
    assert wandb_inits[0]["mode"] == "offline"
    message = " ".join(record.getMessage() for record in caplog.records)
    assert "WANDB_MODE=online" in message and "logger.mode=online" in message and "images" in message


@pytest.mark.parametrize(
    ("env", "configured", "used"), [("disabled", "offline", "disabled"), ("offline", "online", "offline")]
)
def test_the_environment_may_only_lower_tracking(env, configured, used, wandb_inits, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", env)
    tracking.start_run(_logger(configured), "run", "exp", "evaluate", [], {})
    assert wandb_inits[0]["mode"] == used


def test_a_configured_online_run_announces_what_it_uploads(wandb_inits, tmp_path, monkeypatch, caplog) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    with caplog.at_level(logging.WARNING, logger="sparsectx.tracking"):
        tracking.start_run(_logger("online"), "run", "exp", "evaluate", [], {})
    assert wandb_inits[0]["mode"] == "online"
    assert "uploads" in caplog.text and "images" in caplog.text
