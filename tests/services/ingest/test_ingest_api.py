"""The REST API through httpx's ASGI transport, against the real broker.

Not ``fastapi.testclient``: this starlette warns (an error here) that it wants ``httpx2``.
``Http`` does what Http does: runs the app and its lifespan on an event loop in a
thread and offers blocking calls.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import httpx
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from fastapi import FastAPI

from services.ingest.api import create_app
from services.ingest.settings import IngestSettings
from services.ingest.view import StatusView
from streams.identity import execution_id
from streams.records import ExecutionStatus
from tests.services.ingest.test_ingest_view import Feeder

T = TypeVar("T")

pytestmark = pytest.mark.kafka

HOUR_MS = 3_600_000


class Http:
    """Blocking HTTP calls into an ASGI app whose lifespan runs for the whole test."""

    def __init__(self, app: FastAPI, portal: BlockingPortal) -> None:
        self.app, self._portal = app, portal
        self._stack = AsyncExitStack()
        self._client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://ingest"
        )

    async def _enter(self) -> None:
        await self._stack.enter_async_context(self.app.router.lifespan_context(self.app))
        await self._stack.enter_async_context(self._client)

    def start(self) -> None:
        self._portal.call(self._enter)

    def stop(self) -> None:
        self._portal.call(self._stack.aclose)

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``await fn(*args)`` on the app's event loop, from this thread."""
        return self._portal.call(fn, *args)

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self._portal.call(lambda: self._client.request(method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", url, **kwargs)


@contextmanager
def serving(settings: IngestSettings) -> Iterator[Http]:
    """The app of ``settings``, its lifespan running (status view, producer) until the end."""
    with start_blocking_portal() as portal:
        client = Http(create_app(settings), portal)
        client.start()
        try:
            yield client
        finally:
            client.stop()


@pytest.fixture
def http(ingest_settings: IngestSettings) -> Iterator[Http]:
    with serving(ingest_settings.model_copy(update={"max_payload_bytes": 2048})) as client:
        yield client


def view_of(http: Http) -> StatusView:
    view: StatusView = http.app.state.view
    return view


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def iso(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def one_off(**fields: Any) -> dict[str, Any]:
    return {"handler": "reports.nightly", "run_at": now_ms() + HOUR_MS, **fields}


def create(http: Http, body: dict[str, Any], key: str | None = None) -> Any:
    headers = {"Idempotency-Key": key} if key else {}
    return http.post("/api/jobs", json=body, headers=headers)


def locs(response: Any) -> list[list[Any]]:
    assert response.status_code == 422, response.text
    return [e["loc"] for e in response.json()["detail"]]


def test_create_one_off_then_get_it(http: Http) -> None:
    body = one_off(payload={"report": "sales"}, labels={"team": "data"}, timeout_s=90)
    response = create(http, body)
    assert response.status_code == 201, response.text
    answer = response.json()
    assert answer == {
        "job_id": answer["job_id"],
        "status": "SCHEDULED",
        "next_run_at": iso(body["run_at"]),
    }
    job = http.get(f"/api/jobs/{answer['job_id']}").json()  # read-your-writes: no wait
    assert job["type"] == "one_off"
    assert job["payload"] == {"report": "sales"}
    assert job["next_run_at"] == iso(body["run_at"])
    assert (job["timeout_s"], job["labels"], job["recent_executions"]) == (90, {"team": "data"}, [])


def test_create_cron_answers_the_first_tick_after_now(http: Http) -> None:
    before = datetime.now(UTC)
    response = create(http, {"handler": "reports.nightly", "cron": {"expression": "0 2 * * *"}})
    assert response.status_code == 201, response.text
    tick = before.replace(hour=2, minute=0, second=0, microsecond=0)
    if tick <= before:
        tick += timedelta(days=1)
    assert response.json()["next_run_at"] == tick.isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


def test_idempotency_key_repeat_returns_the_first_answer(http: Http) -> None:
    body = {"handler": "reports.nightly", "cron": {"expression": "*/5 * * * *"}}
    first = create(http, body, key="create-7")
    assert first.status_code == 201
    again = create(http, body, key="create-7")
    assert again.status_code == 200
    assert again.json() == first.json()
    conflict = create(http, {**body, "payload": {"x": 1}}, key="create-7")
    assert conflict.status_code == 409
    assert "create-7" in conflict.json()["detail"]
    other = create(http, body, key="create-8")
    assert other.status_code == 201
    assert other.json()["job_id"] != first.json()["job_id"]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"handler": "x.y", "cron": {"expression": "0 25 * * *"}}, ["body", "cron", "expression"]),
        (
            {"handler": "x.y", "cron": {"expression": "0 2 * * *", "timezone": "Nowhere/Land"}},
            ["body", "cron", "timezone"],
        ),
        (one_off(run_at=1_000), ["body", "run_at"]),
        (one_off(handler="Not A Handler"), ["body", "handler"]),
        (one_off(timeout_s=-5), ["body", "timeout_s"]),
        (one_off(payload="x" * 3000), ["body", "payload"]),
        (one_off(cron={"expression": "* * * * *"}), ["body", "cron"]),
        ({"handler": "x.y"}, ["body"]),
    ],
)
def test_invalid_requests_answer_422_naming_the_field(
    http: Http, body: dict[str, Any], loc: list[Any]
) -> None:
    assert loc in locs(create(http, body))


def test_malformed_json_and_bad_header(http: Http) -> None:
    bad_json = http.post(
        "/api/jobs", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert locs(bad_json) == [["body"]]
    long_key = create(http, one_off(), key="k" * 201)
    assert locs(long_key) == [["header", "idempotency-key"]]
    huge = http.post("/api/jobs", content=b" " * 200_000)
    assert huge.status_code == 413


def test_cancel_is_idempotent_and_404_for_unknown(http: Http) -> None:
    job_id = create(http, one_off()).json()["job_id"]
    first = http.delete(f"/api/jobs/{job_id}")
    assert (first.status_code, first.json()) == (200, {"job_id": job_id, "status": "CANCELLED"})
    again = http.delete(f"/api/jobs/{job_id}")
    assert (again.status_code, again.json()) == (200, {"job_id": job_id, "status": "CANCELLED"})
    assert http.delete("/api/jobs/never-created").status_code == 404
    assert http.get("/api/jobs/never-created").status_code == 404


def test_cancel_while_running_is_a_conflict(http: Http, ingest_settings: IngestSettings) -> None:
    job_id = create(http, one_off()).json()["job_id"]
    tick = now_ms()
    feeder = Feeder(ingest_settings)
    feeder.result(job_id, tick, ExecutionStatus.STARTED, worker_id="w1", started_at_ms=tick)
    feeder.flush()
    conflict = http.delete(f"/api/jobs/{job_id}")
    assert conflict.status_code == 409, conflict.text
    assert execution_id(job_id, tick) in conflict.json()["detail"]
    job = http.get(f"/api/jobs/{job_id}").json()
    assert job["status"] == "SCHEDULED"
    assert job["running_executions"] == [execution_id(job_id, tick)]
    assert job["recent_executions"][0]["status"] == "STARTED"
    assert job["recent_executions"][0]["started_at"] == iso(tick)
    feeder.result(job_id, tick, ExecutionStatus.SUCCEEDED, finished_at_ms=tick + 10)
    feeder.flush()
    cancelled = http.delete(f"/api/jobs/{job_id}")
    assert cancelled.status_code == 200, cancelled.text
    job = http.get(f"/api/jobs/{job_id}").json()
    assert (job["status"], job["next_run_at"], job["running_executions"]) == ("CANCELLED", None, [])


def test_pause_resume_trigger(http: Http) -> None:
    job_id = create(http, {"handler": "x.y", "cron": {"expression": "0 * * * *"}}).json()["job_id"]
    paused = http.post(f"/api/jobs/{job_id}/pause")
    assert paused.json() == {"job_id": job_id, "status": "PAUSED"}
    assert http.get(f"/api/jobs/{job_id}").json()["next_run_at"] is None
    assert http.post(f"/api/jobs/{job_id}/pause").status_code == 200
    assert http.post(f"/api/jobs/{job_id}/resume").json()["status"] == "SCHEDULED"
    before = now_ms()
    triggered = http.post(f"/api/jobs/{job_id}/trigger").json()
    assert triggered["status"] == "SCHEDULED"
    fired = datetime.fromisoformat(triggered["manual_fire_at"]).timestamp() * 1000
    assert before - 1 <= fired <= now_ms() + 1
    assert http.delete(f"/api/jobs/{job_id}").status_code == 200
    assert http.post(f"/api/jobs/{job_id}/trigger").status_code == 409
    assert http.post(f"/api/jobs/{job_id}/resume").status_code == 409
    assert http.post("/api/jobs/nope/pause").status_code == 404


def test_dead_letter_pages(http: Http, ingest_settings: IngestSettings) -> None:
    feeder = Feeder(ingest_settings)
    for i in range(3):
        feeder.dead(f"job-{i}", 1_800_000_000_000, dead_at_ms=1_800_000_000_000 + i)
    feeder.flush()
    assert view_of(http).wait_until_caught_up(20)
    page = http.get("/api/dead-letter", params={"limit": 2}).json()
    assert [i["job_id"] for i in page["items"]] == ["job-2", "job-1"]
    assert page["items"][0]["attempts"] == 3
    assert page["items"][0]["dead_at"] == "2027-01-15T08:00:00.002Z"
    rest = http.get("/api/dead-letter", params={"limit": 2, "cursor": page["next_cursor"]})
    assert [i["job_id"] for i in rest.json()["items"]] == ["job-0"]
    assert rest.json()["next_cursor"] is None
    assert locs(http.get("/api/dead-letter", params={"cursor": "bogus"})) == [["query", "cursor"]]
    assert locs(http.get("/api/dead-letter", params={"limit": 0})) == [["query", "limit"]]


def test_healthz(http: Http) -> None:
    deadline = time.monotonic() + 20
    while not view_of(http).ready:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    response = http.get("/healthz")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "ok"
