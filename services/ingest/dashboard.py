"""The web dashboard: its pages at ``/ui`` and the few reads they need beyond the REST API.

The pages (``services/ingest/ui/``: HTML, CSS and plain JavaScript, no framework, nothing
loaded from elsewhere) call the JSON API: job lists and details, executions, dead letters
and their replay, DAG runs. What the API did not have is here, under ``/api/dashboard``:

- ``GET /api/dashboard/live?seconds=N``: outcomes per second and start lateness of the last
  N seconds (1-300), from the status view's window (:mod:`.recent_outcomes`);
- ``GET /api/dashboard/partitions?group=NAME``: the timer's, executor's and dag
  processor's groups (or one of them): partitions, owners, committed offsets, ends and lag
  (:mod:`.group_lag`);
- ``GET /api/dashboard/jobs/{job_id}/next-fires?count=N``: a job's next N (1-100) nominal
  fires (:mod:`.next_fires`).

Bad parameters answer 422 naming them (``[query, seconds]``...), an unknown job 404. Every
response under ``/ui`` carries a Content-Security-Policy allowing this origin only, so the
browser itself refuses anything the pages would load from elsewhere.
"""

from __future__ import annotations

from pathlib import Path as FilePath
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from services.ingest.access import CallerOf, require_admin
from services.ingest.group_lag import GroupLag
from services.ingest.next_fires import next_fires_ms
from services.ingest.presenters import iso
from services.ingest.read_api import json_answer, known_job, view_of
from services.ingest.recent_outcomes import DEFAULT_WINDOW_S
from services.ingest.settings import IngestSettings
from services.ingest.validation import JOB_ID_PATTERN
from streams import clock

UI_DIR = FilePath(__file__).parent / "ui"
UI_URL = "/ui"
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
GroupName = Literal["timer", "executor", "dag"]
_ADMIN_ONLY = {"description": "A tenant's token: this is for an admin token"}
_NOT_FOUND = {"description": "No job with this id is known (the detail names it)"}
_VIEW_BEHIND = {"description": "The status view has not read this API's last write: retry"}


class _Pages(StaticFiles):
    """The dashboard's files, each answered with the Content-Security-Policy header."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_policy(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"content-security-policy", CONTENT_SECURITY_POLICY.encode()))
                headers.append((b"x-content-type-options", b"nosniff"))
                message = {**message, "headers": headers}
            await send(message)

        await super().__call__(scope, receive, send_with_policy)


def install_dashboard(app: FastAPI, settings: IngestSettings) -> None:
    """Mount the pages at ``/ui`` (``/`` leads there) and add the ``/api/dashboard`` reads."""
    groups = GroupLag(settings.kafka)

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse(f"{UI_URL}/")

    @app.get("/api/dashboard/live", response_model=None, responses={403: _ADMIN_ONLY})
    def live(
        request: Request,
        caller: CallerOf,
        seconds: Annotated[int, Query(ge=1, le=DEFAULT_WINDOW_S)] = DEFAULT_WINDOW_S,
    ) -> Response:
        """Outcomes per second (succeeded, failed, dead_letter, other) and start lateness
        (p50, p99, max, in ms) of each of the last ``seconds`` seconds, oldest first, as
        columns, and over all of them (``window``); from the results the status view read.
        Every tenant's: an admin token's."""
        require_admin(caller, "the cluster's live outcomes")
        now_ms = clock.now_ms()  # the services stamp results by the broker's clock
        body = view_of(request).recent_outcomes.series(now_ms, seconds)
        return json_answer({"now_ms": now_ms, **body})

    @app.get("/api/dashboard/partitions", response_model=None, responses={403: _ADMIN_ONLY})
    async def partitions(caller: CallerOf, group: GroupName | None = None) -> Response:
        """The service groups (or ``group``): state, members, and per partition its owner
        (a member's client id), committed offset, end (high watermark) and lag (an admin
        token's)."""
        require_admin(caller, "the service groups' partitions")
        found = await run_in_threadpool(groups.groups)
        chosen = [g for g in found if group is None or g["name"] == group]
        return json_answer({"namespace": settings.kafka.namespace, "groups": chosen})

    @app.get(
        "/api/dashboard/jobs/{job_id}/next-fires",
        response_model=None,
        responses={404: _NOT_FOUND, 503: _VIEW_BEHIND},
    )
    def next_fires(
        request: Request,
        caller: CallerOf,
        job_id: Annotated[str, Path(pattern=JOB_ID_PATTERN)],
        count: Annotated[int, Query(ge=1, le=100)] = 5,
    ) -> Response:
        """The job's next ``count`` nominal fires (none while it is not SCHEDULED, and
        none of its own for a dependent)."""
        view = view_of(request)
        job = known_job(request, job_id, settings.view_catch_up_timeout_s, caller)
        now_ms = clock.now_ms()
        newest = view.executions(job_id)
        fires = next_fires_ms(job, newest, now_ms, count)
        return json_answer(
            {"job_id": job_id, "next_fires": [{"at": iso(t), "at_ms": t} for t in fires]}
        )

    app.mount(UI_URL, _Pages(directory=UI_DIR, html=True), name="ui")
