"""``kafkron backfill JOB --from T1 --to T2``: run a recurring job's past ticks in a window.

The API (``POST /api/jobs/{id}/backfill``) answers how many ticks the window holds (a dry run
lists them); the timer then emits them at ``--rate`` a second with trigger BACKFILL and the
ticks' own execution ids (``<job>@<tick ms>``), so the same backfill twice runs nothing twice.
Unless ``--json``, ``--dry-run`` or ``--no-wait``, a progress bar follows the window's
executions (``GET /api/executions/{id}``) until each has a final outcome.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any
from urllib.parse import quote

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from services.operator_cli.config import Target
from services.operator_cli.exceptions import RefusedError
from services.operator_cli.job_actions import job_path
from services.operator_cli.options import json_option, target_options
from services.operator_cli.output import console, epoch_ms, print_json, table
from services.operator_cli.rest import ApiClient
from streams.identity import execution_id
from streams.records import FINAL_STATUSES

POLL_INTERVAL_S = 0.5
POLL_BATCH = 25
"""Executions checked per poll: the earliest still without a final outcome."""


def tick_ms(tick: Any) -> int:
    """A tick of the API's answer (epoch ms, or ISO-8601) as epoch ms."""
    if isinstance(tick, int):
        return tick
    at = epoch_ms(str(tick))
    if at is None:
        raise RefusedError(f"the API answered a tick that is not a time: {tick!r}")
    return at


def ticks_of(answer: dict[str, Any]) -> tuple[int, list[int] | None]:
    """(how many ticks, their list when the answer has one) from a backfill answer:
    ``ticks`` counts them, a dry run lists them in ``tick_times`` (``at_ms``, ``at``)."""
    listed = answer.get("tick_times")
    ticks = None
    if isinstance(listed, list):
        ticks = [tick_ms(t.get("at_ms", t.get("at")) if isinstance(t, dict) else t) for t in listed]
    count = answer.get("ticks")
    return (count if isinstance(count, int) else len(ticks or [])), ticks


class OutcomeWatch:
    """The final outcomes of a backfill's executions, polled through the API in tick order."""

    def __init__(self, api: ApiClient, job_id: str, ticks: list[int]) -> None:
        self.api = api
        self.pending = [execution_id(job_id, t) for t in sorted(ticks)]
        self.outcomes: Counter[str] = Counter()

    def poll(self) -> int:
        """Check the earliest pending executions; how many reached a final outcome now."""
        done = 0
        for name in list(self.pending[:POLL_BATCH]):
            status = self._status(name)
            if status is None:
                break  # emitted in tick order: the later ones are not there yet either
            if status in FINAL_STATUSES:
                self.pending.remove(name)
                self.outcomes[status] += 1
                done += 1
        return done

    def _status(self, name: str) -> str | None:
        try:
            answer = self.api.get(f"/api/executions/{quote(name, safe='')}")
        except RefusedError as exc:
            if exc.status_code == 404:
                return None
            raise
        status = answer.get("status")
        return str(status) if status is not None else None


@click.command()
@click.argument("job_id")
@click.option("--from", "from_", required=True, help="window start, ISO-8601 with a zone or ms")
@click.option("--to", required=True, help="window end (inclusive), ISO-8601 with a zone or ms")
@click.option("--rate", type=click.IntRange(1, 10_000), help="ticks emitted per second")
@click.option("--dry-run", is_flag=True, help="list the window's ticks, run nothing")
@click.option("--no-wait", is_flag=True, help="return once the backfill is accepted")
@click.option("--timeout-s", type=click.FloatRange(min=0), default=600.0, show_default=True,
              help="how long the progress bar waits for the final outcomes")  # fmt: skip
@target_options(api=True)
@json_option
def backfill(
    target: Target, as_json: bool, job_id: str, from_: str, to: str, rate: int | None,
    dry_run: bool, no_wait: bool, timeout_s: float,
) -> int:  # fmt: skip
    """Run a recurring job's ticks in [--from, --to] now, once each (trigger BACKFILL)."""
    body: dict[str, Any] = {"from": _time_value(from_), "to": _time_value(to), "dry_run": dry_run}
    if rate is not None:
        body["rate"] = rate
    with ApiClient(target.api_url, token=target.token) as api:
        path = job_path(job_id, "backfill")
        wait = not (as_json or dry_run or no_wait)
        listing = api.post(path, {**body, "dry_run": True}) if wait and not dry_run else None
        answer: dict[str, Any] = api.post(path, body)
        if as_json:
            print_json(answer)
            return 0
        count, ticks = ticks_of(answer)
        if dry_run:
            return _print_dry_run(job_id, count, ticks or [])
        click.echo(f"backfill of {job_id}: {count} tick(s) accepted")
        if not wait:
            return 0
        _, ticks = ticks_of(listing or {})
        return _follow(OutcomeWatch(api, job_id, ticks or []), timeout_s)


def _time_value(text: str) -> str | int:
    return int(text) if text.isdigit() else text


def _print_dry_run(job_id: str, count: int, ticks: list[int]) -> int:
    rows = [(execution_id(job_id, t), time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(t / 1000)))
            for t in ticks]  # fmt: skip
    console().print(table(["EXECUTION", "TICK"], rows))
    click.echo(f"{count} tick(s) would run (dry run: nothing ran)")
    return 0


def _follow(watch: OutcomeWatch, timeout_s: float) -> int:
    """Draw the progress until every execution has its final outcome or ``timeout_s``."""
    total = len(watch.pending)
    deadline = time.monotonic() + timeout_s
    columns = (TextColumn("executions"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console()) as progress:
        task = progress.add_task("backfill", total=total)
        while watch.pending and time.monotonic() < deadline:
            progress.advance(task, watch.poll())
            if watch.pending:
                time.sleep(POLL_INTERVAL_S)
    outcomes = ", ".join(f"{n} {s}" for s, n in sorted(watch.outcomes.items())) or "none"
    click.echo(f"final outcomes: {outcomes}")
    if watch.pending:
        raise RefusedError(
            f"{len(watch.pending)} of {total} execution(s) have no final outcome after "
            f"{timeout_s:.0f} s (first: {watch.pending[0]}); the backfill goes on: follow it "
            "with 'kafkron history'"
        )
    return 0
