"""``kafkron submit | cancel | pause | resume | trigger``: commands that change jobs, over the
REST API. Each prints what the job's status became (``--json``: the API's answer)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from services.operator_cli.config import Target
from services.operator_cli.options import json_option, target_options
from services.operator_cli.output import human_time, now_ms, print_json
from services.operator_cli.rest import ApiClient

_CHOICES = {
    "priority": ["HIGH", "NORMAL", "LOW"],
    "overlap": ["skip", "queue_one", "allow", "replace"],
    "catchup": ["latest", "all", "none"],
}


def job_path(job_id: str, *rest: str) -> str:
    """``/api/jobs/<id>[/rest...]`` with the id escaped."""
    return "/".join(["/api/jobs", quote(job_id, safe=""), *rest])


def parse_labels(labels: tuple[str, ...]) -> dict[str, str]:
    """``KEY=VALUE`` pairs as a dict; anything else is a usage error."""
    parsed: dict[str, str] = {}
    for label in labels:
        key, sep, value = label.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{label!r} is not KEY=VALUE", param_hint="--label")
        parsed[key] = value
    return parsed


def _json_value(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON ({exc})", param_hint=option) from None


def _read_job_file(path: Path) -> dict[str, Any]:
    text = sys.stdin.read() if str(path) == "-" else path.read_text()
    body = _json_value(text, "--file")
    if not isinstance(body, dict):
        raise click.BadParameter("the job must be a JSON object", param_hint="--file")
    return body


def job_request(file: Path | None, handler: str | None, given: dict[str, Any]) -> dict[str, Any]:
    """The body of ``POST /api/jobs``: the file's job (if any), then the flags given."""
    body = _read_job_file(file) if file is not None else {}
    if handler is not None:
        body["handler"] = handler
    cron = dict(body.get("cron") or {})
    if given.get("cron_expression") is not None:
        cron["expression"] = given["cron_expression"]
    if given.get("timezone") is not None:
        cron["timezone"] = given["timezone"]
    if cron:
        body["cron"] = cron
    if given.get("max_attempts") is not None:
        body["retry"] = {**(body.get("retry") or {}), "max_attempts": given["max_attempts"]}
    for name in ("job_id", "run_at", "priority", "timeout_s", "overlap", "catchup", "tenant"):
        if given.get(name) is not None:
            body[name] = given[name]
    if given.get("depends_on"):
        body["depends_on"] = list(given["depends_on"])
    if given.get("payload") is not None:
        body["payload"] = _json_value(given["payload"], "--payload")
    if given.get("labels"):
        body["labels"] = {**(body.get("labels") or {}), **parse_labels(given["labels"])}
    if "handler" not in body:
        raise click.UsageError("say which handler runs the job: HANDLER, or 'handler' in --file")
    return body


@click.command()
@click.argument("handler", required=False)
@click.option(
    "--file",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
    help="a job as JSON (the body of POST /api/jobs; '-' reads stdin); flags override it",
)
@click.option("--job-id", help="the job's id (default: the API makes one)")
@click.option("--run-at", help="one-off: when, ISO-8601 with a zone or epoch ms")
@click.option("--cron", "cron_expression", help="recurring: a cron expression (5 or 6 fields)")
@click.option("--timezone", help="the cron's IANA time zone (default UTC)")
@click.option("--depends-on", multiple=True, help="dependent: an upstream job id (repeatable)")
@click.option("--payload", help="the handler's payload, JSON")
@click.option("--priority", type=click.Choice(_CHOICES["priority"], case_sensitive=False))
@click.option("--timeout-s", type=click.FloatRange(min=0, min_open=True), help="run timeout")
@click.option("--max-attempts", type=click.IntRange(min=1), help="attempts before dead letter")
@click.option("--overlap", type=click.Choice(_CHOICES["overlap"], case_sensitive=False))
@click.option("--catchup", type=click.Choice(_CHOICES["catchup"], case_sensitive=False))
@click.option("--tenant")
@click.option("--label", "labels", multiple=True, help="KEY=VALUE (repeatable)")
@click.option("--idempotency-key", help="a repeat with this key answers the first create")
@target_options(api=True)
@json_option
def submit(
    target: Target, as_json: bool, handler: str | None, file: Path | None,
    idempotency_key: str | None, **given: Any,
) -> int:  # fmt: skip
    """Create a job (one-off, cron or dependent) and print its id and next run."""
    body = job_request(file, handler, given)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    with ApiClient(target.api_url, token=target.token) as api:
        response = api.send("POST", "/api/jobs", json=body, headers=headers)
    answer: dict[str, Any] = response.json()
    answer["created"] = response.status_code == 201
    if as_json:
        print_json(answer)
        return 0
    verb = "created" if answer["created"] else "already created (same idempotency key)"
    next_run = human_time(answer.get("next_run_at"), now_ms())
    click.echo(f"{verb} job {answer['job_id']}: {answer['status']}, next run {next_run}")
    return 0


def _job_command(name: str, method: str, action: str | None, summary: str) -> click.Command:
    """One of cancel, pause, resume and trigger: a call on one job, its new status printed."""

    @click.command(name=name, help=summary)
    @click.argument("job_id")
    @target_options(api=True)
    @json_option
    def command(target: Target, as_json: bool, job_id: str) -> int:
        path = job_path(job_id, action) if action else job_path(job_id)
        with ApiClient(target.api_url, token=target.token) as api:
            answer: dict[str, Any] = api.request(method, path)
        if as_json:
            print_json(answer)
            return 0
        fire = answer.get("manual_fire_at")
        fires = f", fires {human_time(fire, now_ms())}" if fire else ""
        click.echo(f"job {answer['job_id']}: {answer['status']}{fires}")
        return 0

    return command


cancel = _job_command(
    "cancel", "DELETE", None, "Cancel a job (refused, exit 1, while an execution runs)."
)
pause = _job_command("pause", "POST", "pause", "Stop firing a job until it is resumed.")
resume = _job_command("resume", "POST", "resume", "Fire a paused job again from its next tick.")
trigger = _job_command("trigger", "POST", "trigger", "Fire a job once now, besides its schedule.")

COMMANDS = [submit, cancel, pause, resume, trigger]
