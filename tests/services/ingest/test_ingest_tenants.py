"""Tenants through the REST API: two tenants' tokens and an admin's, on the real broker.

Every route that is not public takes the caller (``Depends(caller_of)``) and has a case in
:data:`BY_ID` or :data:`LISTS`; ``test_every_route_is_tenant_checked_or_public`` fails on a
route that has neither, so a new endpoint cannot be forgotten. Each cross-tenant attempt
must answer what a missing id answers (404, the same body) and change nothing: the owner
reads the same job afterwards, and no record was written for it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from anyio.from_thread import start_blocking_portal
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from services.ingest.access import BearerAuth, caller_of, is_public, static_prefixes
from services.ingest.api import create_app
from services.ingest.create_lane import BATCH_PATH, CREATE_PATH
from services.ingest.settings import IngestSettings
from streams.api_tokens import add_token, revoke_token
from streams.codec import RecordKind
from streams.identity import execution_id
from streams.records import DeadLetter, DeadLetterKind, DueEvent, ExecutionStatus
from streams.topics import Priority, TopicNames
from tests.services.ingest.conftest import read_topic
from tests.services.ingest.test_ingest_api import HOUR_MS, Http, now_ms, serving
from tests.services.ingest.test_ingest_view import CODEC, Feeder

TICK = 1_800_000_000_000  # a tick of the owner's job with a SUCCEEDED execution
DEAD_TICK = TICK + 86_400_000  # one with a dead letter
WINDOW = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T12:00:00Z", "rate": 100}

# Routes that name one resource: (method, path) -> the request's path parameters and body.
# "{job}" is the owner's job (a cron root), "{run}" its tick TICK, "{dead}" DEAD_TICK.
BY_ID: dict[tuple[str, str], tuple[str, dict[str, Any] | None]] = {
    ("GET", "/api/jobs/{job_id}"): ("/api/jobs/{job}", None),
    ("GET", "/api/jobs/{job_id}/executions"): ("/api/jobs/{job}/executions", None),
    ("GET", "/api/executions/{execution_id}"): ("/api/executions/{job}@{run}", None),
    ("GET", "/api/dag-runs/{root_job_id}/{run_key_ms}"): ("/api/dag-runs/{job}/{run}", None),
    ("DELETE", "/api/jobs/{job_id}"): ("/api/jobs/{job}", None),
    ("POST", "/api/jobs/{job_id}/trigger"): ("/api/jobs/{job}/trigger", None),
    ("POST", "/api/jobs/{job_id}/pause"): ("/api/jobs/{job}/pause", None),
    ("POST", "/api/jobs/{job_id}/resume"): ("/api/jobs/{job}/resume", None),
    ("POST", "/api/jobs/{job_id}/backfill"): ("/api/jobs/{job}/backfill", WINDOW),
    ("POST", "/api/dead-letter/{execution_id}/replay"): (
        "/api/dead-letter/{job}@{dead}/replay",
        None,
    ),
    ("GET", "/api/dashboard/jobs/{job_id}/next-fires"): (
        "/api/dashboard/jobs/{job}/next-fires",
        None,
    ),
}
# Routes that list: each is checked to list only the caller's tenant (admin: every tenant).
LISTS = {("GET", "/api/jobs"), ("GET", "/api/dead-letter")}
# Routes about the whole cluster, not about jobs: an admin token's only (403 for a tenant's).
ADMIN_ONLY = {("GET", "/api/dashboard/live"), ("GET", "/api/dashboard/partitions")}
# The creates are served by the create lane (no FastAPI route): tested below, by name.
CREATES = {("POST", CREATE_PATH), ("POST", BATCH_PATH)}


def _takes_caller(route: APIRoute) -> bool:
    pending = list(route.dependant.dependencies)
    while pending:
        dependency = pending.pop()
        if dependency.call is caller_of:
            return True
        pending.extend(dependency.dependencies)
    return False


def test_every_route_is_tenant_checked_or_public(tmp_path: Path) -> None:
    """Not a Kafka test: the routes of the app as ``create_app`` builds it, lifespan unrun."""
    tokens, _ = add_token(tmp_path / "tokens.json", "acme")
    app = create_app(IngestSettings(tokens_file=tmp_path / "tokens.json", view_dir=tmp_path))
    static = static_prefixes(app.routes)
    scoped, forgotten = set(), []
    for route in app.routes:
        if isinstance(route, Mount) and isinstance(route.app, StaticFiles):
            continue  # static files: public by design (no job data)
        if isinstance(route, APIRoute) and _takes_caller(route):
            assert route.methods is not None  # an APIRoute has its methods (GET by default)
            scoped |= {(method, route.path) for method in route.methods}
        elif isinstance(route, Route | Mount) and is_public(route.path, static):
            pass  # a public path, or an app mounted at one (/metrics)
        else:
            forgotten.append(getattr(route, "path", repr(route)))
    assert not forgotten, (
        f"routes neither tenant-checked (Depends(caller_of)) nor public: {forgotten}"
    )
    untested = scoped - set(BY_ID) - LISTS - ADMIN_ONLY
    assert not untested, f"tenant-checked routes without an isolation case here: {untested}"
    assert set(BY_ID) | LISTS | ADMIN_ONLY <= scoped, "a case for a route the app no longer has"
    assert tokens


def test_every_protected_route_and_the_creates_answer_401_without_a_valid_token(
    tmp_path: Path,
) -> None:
    """Through the app and through the uvicorn front (``main._config``), lifespan unrun: the
    token check answers before anything needs the view or the producer."""
    from services.ingest.main import _config

    add_token(tmp_path / "tokens.json", "acme")
    settings = IngestSettings(tokens_file=tmp_path / "tokens.json", view_dir=tmp_path)
    app = create_app(settings)
    calls = [(m, p.replace("{job}", "j").replace("{run}", "1").replace("{dead}", "1"))
             for (m, _), (p, _) in BY_ID.items()]  # fmt: skip
    calls += [*LISTS, *ADMIN_ONLY, *CREATES]
    with start_blocking_portal() as portal:
        front = _config(settings).app
        assert isinstance(front, BearerAuth)  # the token check, in front of the app
        for target in (app, front):
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=target), base_url="http://ingest"
            )
            for method, path in calls:
                for headers, invalid in (
                    ({}, False),
                    ({"Authorization": "Bearer kfr_000000000000_nope"}, True),
                    ({"Authorization": "Basic dXNlcjpwYXNz"}, False),
                ):
                    answer = portal.call(partial(client.request, method, path, headers=headers))
                    assert answer.status_code == 401, (method, path, answer.text)
                    challenge = answer.headers["www-authenticate"]
                    assert challenge.startswith("Bearer")
                    assert ('error="invalid_token"' in challenge) == invalid
            portal.call(client.aclose)


# With the broker -------------------------------------------------------------------------


@dataclass
class Tokens:
    path: Path
    acme: str
    globex: str
    admin: str


@pytest.fixture
def tokens(tmp_path: Path) -> Tokens:
    path = tmp_path / "tokens.json"
    return Tokens(path, add_token(path, "acme")[0], add_token(path, "globex")[0],
                  add_token(path, None)[0])  # fmt: skip


@pytest.fixture
def http(ingest_settings: IngestSettings, tokens: Tokens) -> Iterator[Http]:
    with serving(ingest_settings.model_copy(update={"tokens_file": tokens.path})) as client:
        yield client


class As:
    """``http`` with one caller's token."""

    def __init__(self, http: Http, token: str) -> None:
        self.http, self.headers = http, {"Authorization": f"Bearer {token}"}

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        headers = {**self.headers, **kwargs.pop("headers", {})}
        return self.http.request(method, url, headers=headers, **kwargs)

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)


def dead_letter(feeder: Feeder, job_id: str, tick: int, tenant: str) -> None:
    due = DueEvent(
        execution_id=execution_id(job_id, tick), job_id=job_id, job_version=1,
        scheduled_for_ms=tick, fire_at_ms=tick, attempt=3, handler="reports.nightly",
        timeout_ms=1000, emitted_at_ms=tick, tenant=tenant,
    )  # fmt: skip
    record = DeadLetter(kind=DeadLetterKind.EXECUTION, reason="retries exhausted",
                        execution=due, last_error="boom", dead_at_ms=tick + 1)  # fmt: skip
    feeder.send(feeder.names.dlq, job_id, CODEC.encode(RecordKind.DEAD_LETTER, record.to_avro()))


def records_of(settings: IngestSettings, job_id: str) -> list[tuple[str, bytes | None]]:
    """Every record keyed ``job_id`` on ``jobs`` and the due topics, with its topic."""
    names = TopicNames(settings.kafka.namespace)
    found = []
    for topic in [names.jobs, *(names.due(p) for p in Priority)]:
        for message in read_topic(settings.kafka, topic):
            if message.key() == job_id.encode():
                found.append((topic, message.value()))
    return found


def created(answer: httpx.Response) -> str:
    assert answer.status_code == 201, answer.text
    job_id: str = answer.json()["job_id"]
    return job_id


def wait_until(check: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.05)


@dataclass
class World:
    """What acme (the owner) has: a cron root with an execution and a dead letter, and a
    dependent; what globex has: one job."""

    job: str
    dependent: str
    globex_job: str


@pytest.fixture
def world(http: Http, tokens: Tokens, ingest_settings: IngestSettings) -> World:
    acme, globex = As(http, tokens.acme), As(http, tokens.globex)
    cron = {"handler": "reports.nightly", "cron": {"expression": "0 3 * * *"}}
    job = created(acme.post("/api/jobs", json=cron, headers={"Idempotency-Key": "shared"}))
    dependent = created(acme.post("/api/jobs", json={"handler": "reports.nightly",
                                                     "depends_on": [job]}))  # fmt: skip
    globex_job = created(globex.post("/api/jobs", json=cron))
    feeder = Feeder(ingest_settings)
    feeder.result(job, TICK, ExecutionStatus.SUCCEEDED)
    feeder.result(job, DEAD_TICK, ExecutionStatus.DEAD_LETTER)
    dead_letter(feeder, job, DEAD_TICK, "acme")
    dead_letter(feeder, globex_job, DEAD_TICK, "globex")
    feeder.flush()
    view = http.app.state.view
    wait_until(lambda: view.dead_letter_of(execution_id(globex_job, DEAD_TICK)) is not None)
    wait_until(lambda: view.dead_letter_of(execution_id(job, DEAD_TICK)) is not None)
    return World(job, dependent, globex_job)


def path_of(template: str, job: str) -> str:
    return template.format(job=job, run=TICK, dead=DEAD_TICK)


@pytest.mark.kafka
def test_another_tenants_ids_answer_like_missing_ones_and_change_nothing(
    http: Http, tokens: Tokens, world: World, ingest_settings: IngestSettings
) -> None:
    acme, globex = As(http, tokens.acme), As(http, tokens.globex)
    before = acme.get(f"/api/jobs/{world.job}").json()
    written_before = records_of(ingest_settings, world.job)
    missing = f"nope-{uuid.uuid4().hex[:8]}"
    for (method, route), (template, body) in BY_ID.items():
        foreign = globex.request(method, path_of(template, world.job), json=body)
        absent = globex.request(method, path_of(template, missing), json=body)
        assert absent.status_code == 404, (route, absent.text)
        assert foreign.status_code == 404, (route, foreign.text)
        assert foreign.json() == {"detail": absent.json()["detail"].replace(missing, world.job)}
    # Nothing changed: the owner reads the same job, and nothing was written for it.
    assert acme.get(f"/api/jobs/{world.job}").json() == before
    assert records_of(ingest_settings, world.job) == written_before
    assert before["status"] == "SCHEDULED" and before["manual_fire_at"] is None
    # The same requests by the owner (and the admin) are served: the 404s were the tenant's.
    admin = As(http, tokens.admin)
    for (method, route), (template, _) in BY_ID.items():
        if method == "GET":
            for caller in (acme, admin):
                answer = caller.get(path_of(template, world.job))
                assert answer.status_code == 200, (route, answer.text)
    assert acme.post(f"/api/jobs/{world.job}/backfill", json={**WINDOW, "dry_run": True}
                     ).json()["ticks"] == 2  # fmt: skip
    assert acme.post(f"/api/jobs/{world.job}/pause").json()["status"] == "PAUSED"
    assert admin.post(f"/api/jobs/{world.job}/resume").json()["status"] == "SCHEDULED"
    assert acme.post(f"/api/jobs/{world.job}/trigger").status_code == 200
    replay = acme.post(path_of("/api/dead-letter/{job}@{dead}/replay", world.job))
    assert replay.status_code == 200, replay.text
    assert acme.request("DELETE", f"/api/jobs/{world.job}").json()["status"] == "CANCELLED"


@pytest.mark.kafka
def test_lists_show_only_the_callers_tenant_and_the_admin_every_one(
    http: Http, tokens: Tokens, world: World
) -> None:
    acme, globex, admin = (As(http, t) for t in (tokens.acme, tokens.globex, tokens.admin))
    assert http.app.state.view.wait_until_caught_up(20)

    def job_ids(caller: As, **params: Any) -> set[str]:
        answer = caller.get("/api/jobs", params={"limit": 500, **params})
        assert answer.status_code == 200, answer.text
        return {item["job_id"] for item in answer.json()["items"]}

    def dead_ids(caller: As) -> set[str]:
        answer = caller.get("/api/dead-letter", params={"limit": 500})
        assert answer.status_code == 200, answer.text
        return {item["job_id"] for item in answer.json()["items"]}

    assert job_ids(acme) == {world.job, world.dependent}
    assert job_ids(globex) == {world.globex_job}
    assert job_ids(globex, tenant="acme") == set()
    assert job_ids(globex, tenant="globex") == {world.globex_job}
    assert job_ids(admin) == {world.job, world.dependent, world.globex_job}
    assert job_ids(admin, tenant="acme") == {world.job, world.dependent}
    assert dead_ids(acme) == {world.job}
    assert dead_ids(globex) == {world.globex_job}
    assert dead_ids(admin) == {world.job, world.globex_job}
    for _, path in ADMIN_ONLY:
        assert acme.get(path).status_code == 403
        assert admin.get(path).status_code == 200


@pytest.mark.kafka
def test_a_created_jobs_tenant_is_the_tokens_on_every_create_path(
    http: Http, tokens: Tokens, world: World
) -> None:
    acme, globex, admin = (As(http, t) for t in (tokens.acme, tokens.globex, tokens.admin))
    run_at = now_ms() + HOUR_MS
    plain = {"handler": "reports.nightly", "run_at": run_at}  # the bulk encoder's shape

    def tenant_of(job_id: str) -> str:
        answer = admin.get(f"/api/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        tenant: str = answer.json()["tenant"]
        assert globex.get(f"/api/jobs/{job_id}").status_code == (200 if tenant == "globex" else 404)
        return tenant

    # Single creates: the bulk path, keyed (derived id), an explicit id, a cron job.
    assert tenant_of(created(globex.post("/api/jobs", json=plain))) == "globex"
    keyed = created(globex.post("/api/jobs", json=plain, headers={"Idempotency-Key": "k1"}))
    assert tenant_of(keyed) == "globex"
    explicit = f"g-{uuid.uuid4().hex[:8]}"
    assert tenant_of(created(globex.post("/api/jobs", json={**plain, "job_id": explicit}))) == (
        "globex"
    )
    same = globex.post("/api/jobs", json={**plain, "tenant": "globex"})
    assert tenant_of(created(same)) == "globex"
    # Another tenant in the body: 422 naming tenant, nothing created.
    other = globex.post("/api/jobs", json={**plain, "tenant": "acme", "job_id": "g-stolen"})
    assert other.status_code == 422
    assert [e["loc"] for e in other.json()["detail"]] == [["body", "tenant"]]
    assert admin.get("/api/jobs/g-stolen").status_code == 404
    # acme's idempotency key, reused by globex with acme's body: a new globex job, not acme's.
    cron = {"handler": "reports.nightly", "cron": {"expression": "0 3 * * *"}}
    reused = globex.post("/api/jobs", json=cron, headers={"Idempotency-Key": "shared"})
    assert tenant_of(created(reused)) == "globex" and reused.json()["job_id"] != world.job
    # depends_on another tenant's job: refused as if it did not exist.
    missing = f"nope-{uuid.uuid4().hex[:8]}"
    refusals = [
        globex.post("/api/jobs", json={"handler": "reports.nightly", "depends_on": [name]})
        for name in (world.job, missing)
    ]
    assert [r.status_code for r in refusals] == [422, 422]
    messages = [r.json()["detail"][0]["msg"] for r in refusals]
    assert messages[0] == messages[1].replace(missing, world.job)
    # An explicit id another tenant has: a conflict (ids are global), never a repeat of it.
    taken = globex.post("/api/jobs", json={**cron, "job_id": world.job})
    assert taken.status_code == 409 and acme.get(f"/api/jobs/{world.job}").status_code == 200
    # A batch: per item, the same rules (the bulk shape, keyed, another tenant, a dependent).
    items = [
        {"job": plain},
        {"job": plain, "idempotency_key": "k2"},
        {"job": {**plain, "tenant": "acme"}},
        {"job": {"handler": "reports.nightly", "depends_on": [world.job]}},
    ]
    answer = globex.post("/api/jobs/batch", json={"items": items})
    assert answer.status_code == 200, answer.text
    results = answer.json()["items"]
    assert [r["status_code"] for r in results] == [201, 201, 422, 422]
    assert [tenant_of(r["job_id"]) for r in results[:2]] == ["globex", "globex"]
    assert results[2]["detail"][0]["loc"] == ["body", "items", 2, "job", "tenant"]
    assert results[3]["detail"][0]["loc"][-1] == "depends_on"
    # The admin's body says the tenant (default "default").
    assert tenant_of(created(admin.post("/api/jobs", json={**plain, "tenant": "acme"}))) == "acme"
    assert tenant_of(created(admin.post("/api/jobs", json=plain))) == "default"


@pytest.mark.kafka
def test_tokens_rotate_without_a_restart_and_health_stays_open(
    http: Http, tokens: Tokens, world: World
) -> None:
    new, entry = add_token(tokens.path, "acme")
    wait_until(lambda: As(http, new).get(f"/api/jobs/{world.job}").status_code == 200, 5)
    old_id = next(e for e in _entries(tokens.path) if tokens.acme.split("_")[1] == e)
    assert revoke_token(tokens.path, old_id)
    wait_until(lambda: As(http, tokens.acme).get(f"/api/jobs/{world.job}").status_code == 401, 5)
    assert As(http, new).get(f"/api/jobs/{world.job}").status_code == 200
    assert entry.tenant == "acme"
    wait_until(lambda: http.get("/healthz").status_code == 200)
    assert http.get("/openapi.json").status_code == 200
    assert http.get("/api/jobs").status_code == 401


def _entries(path: Path) -> list[str]:
    from streams.api_tokens import read_tokens_file

    return [entry.id for entry in read_tokens_file(path).tokens]
