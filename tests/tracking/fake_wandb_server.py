"""A W&B server on localhost that keeps what ``wandb sync`` uploads, so a test can read the synced run back.

It answers the requests wandb-core's sync makes (wandb 0.31; the operations and fields are those of
wandb/wandb ``core/api/graphql/*.graphql``): ``RunResumeStatus`` (the run, once it exists, with its history
line count and summary), ``UpsertBucket`` (creates or updates the run; its ``historyLineCount`` is where
wandb-core continues the run's history, ``core/internal/runupserter/runupserter.go``
``lockedUpdateFromUpsert``), ``CreateRunFiles`` (upload URLs, here on this server) and the file stream
(``POST /files/<entity>/<project>/<run>/file_stream``: ``wandb-history.jsonl`` lines written at their offset,
``wandb-summary.json`` replaced). Every other request (other queries, wandb-core's OpenTelemetry posts) gets
an empty answer. No tests here.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ENTITY = "tester"


@dataclass
class SyncedRun:
    """What the server holds of one run: history lines by offset, the summary, tags and name."""

    history: list[str | None] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    name: str | None = None
    config: str = "{}"

    def rows(self) -> list[dict[str, Any]]:
        """Returns the run's history rows in line order (a line never written would be a hole: None)."""
        return [json.loads(line) if line is not None else None for line in self.history]


@dataclass
class FakeServer:
    """The runs the server holds, by run id, and its base URL."""

    url: str
    runs: dict[str, SyncedRun] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _resume_status(server: FakeServer, variables: dict[str, Any]) -> dict[str, Any]:
    run = server.runs.get(variables["name"])
    bucket = None
    if run is not None:
        lines = [line for line in run.history if line is not None]
        bucket = {
            "id": f"storage-{variables['name']}",
            "name": variables["name"],
            "displayName": run.name,
            "summaryMetrics": json.dumps(run.summary),
            "logLineCount": 0,
            "historyLineCount": len(run.history),
            "eventsLineCount": 0,
            "historyTail": json.dumps(lines[-1:]),
            "eventsTail": "[]",
            "config": run.config,
            "tags": run.tags,
            "notes": None,
            "wandbConfig": json.dumps({"t": {}}),
        }
    project = {"id": "project-id", "name": variables.get("project"), "entity": {"id": "entity-id", "name": ENTITY}}
    return {"model": {**project, "bucket": bucket}}


def _upsert(server: FakeServer, variables: dict[str, Any]) -> dict[str, Any]:
    run = server.runs.setdefault(variables["name"], SyncedRun())
    if variables.get("tags") is not None:
        run.tags = list(variables["tags"])
    if variables.get("displayName"):
        run.name = variables["displayName"]
    if variables.get("config"):
        run.config = variables["config"]
    project = {"id": "project-id", "name": variables.get("project"), "entity": {"id": "entity-id", "name": ENTITY}}
    bucket = {
        "id": f"storage-{variables['name']}",
        "name": variables["name"],
        "displayName": run.name,
        "description": None,
        "config": run.config,
        "sweepName": None,
        "project": project,
        "historyLineCount": len(run.history),
    }
    return {"upsertBucket": {"bucket": bucket, "inserted": True}}


def _file_stream(server: FakeServer, run_id: str, payload: dict[str, Any]) -> None:
    run = server.runs.setdefault(run_id, SyncedRun())
    for name, chunk in payload.get("files", {}).items():
        if name == "wandb-history.jsonl":
            for index, line in enumerate(chunk["content"], start=chunk["offset"]):
                run.history.extend([None] * (index + 1 - len(run.history)))
                run.history[index] = line
        elif name == "wandb-summary.json" and chunk["content"]:
            run.summary = json.loads(chunk["content"][-1])


def _handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            """Keeps the test output quiet."""

        def _answer(self, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _read(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def do_PUT(self) -> None:  # noqa: N802 (http.server's name)
            """Accepts a file upload (the URLs CreateRunFiles hands out)."""
            self._read()
            self._answer({})

        def do_GET(self) -> None:  # noqa: N802
            """Answers any read with an empty object."""
            self._answer({})

        def do_POST(self) -> None:  # noqa: N802
            """Answers GraphQL and the file stream."""
            body = self._read()
            if not body.startswith(b"{"):  # wandb-core's own telemetry (OpenTelemetry protobuf): not kept
                return self._answer({})
            payload = json.loads(body)
            with server.lock:
                if self.path.endswith("/file_stream"):
                    _file_stream(server, self.path.split("/")[-2], payload)
                    return self._answer({"exitcode": None, "limits": {}})
                operation, variables = payload.get("operationName"), payload.get("variables") or {}
                if operation == "RunResumeStatus":
                    return self._answer({"data": _resume_status(server, variables)})
                if operation == "UpsertBucket":
                    return self._answer({"data": _upsert(server, variables)})
                if operation == "CreateRunFiles":
                    files = [{"name": f, "uploadUrl": f"{server.url}/upload/{f}"} for f in variables["files"]]
                    answer = {"runID": "storage", "uploadHeaders": [], "files": files}
                    return self._answer({"data": {"createRunFiles": answer}})
            return self._answer({"data": {}})

    return Handler


@contextmanager
def fake_wandb_server() -> Iterator[FakeServer]:
    """Yields a running fake W&B server on a free localhost port; stops it afterwards."""
    server = FakeServer(url="")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
