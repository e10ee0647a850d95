"""``kafkron dlq list | replay``: the dead-letter topic, read and replayed over Kafka itself
(``streams/dlq.py``), so they work while the API is down; the cluster comes from
the flags, the environment or the local profile like every other command.

With an API token (``--token``, ``KAFKRON_TOKEN``, the profile's) they go through the REST
API instead (``GET /api/dead-letter``, ``POST /api/dead-letter/{id}/replay``): a tenant
sees and replays only its own dead letters, and needs no Kafka credentials."""

from __future__ import annotations

import base64
from dataclasses import asdict
from typing import Any
from urllib.parse import quote

import click

from services.operator_cli.config import Target
from services.operator_cli.options import json_option, target_options
from services.operator_cli.output import print_json
from services.operator_cli.rest import ApiClient
from streams.settings import KafkaSettings


def jsonable(value: Any) -> Any:
    """``value`` with every bytes as base64 text, so JSON can carry a record."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


@click.group()
def dlq() -> None:
    """The dead-letter queue: dead executions and unusable records."""


@dlq.command(name="list")
@click.option("--limit", type=click.IntRange(min=0), help="print at most this many")
@target_options(kafka=True, api=True)
@json_option
def list_dead_letters(target: Target, as_json: bool, limit: int | None) -> int:
    """Print every dead letter, oldest first, partition by partition (with a token: the
    API's list, newest first)."""
    if target.token is not None:
        return _list_over_api(target, as_json, limit)
    from streams.codec import Codec
    from streams.dlq import DeadLetterRow, describe, read_dead_letters

    rows: list[DeadLetterRow] = []
    for row in read_dead_letters(target.kafka_settings(KafkaSettings()), Codec.from_directory()):
        if limit is not None and len(rows) >= limit:
            break
        rows.append(row)
    if as_json:
        print_json({"items": [jsonable(asdict(row)) for row in rows]})
        return 0
    for row in rows:
        click.echo(describe(row))
    click.echo(f"{len(rows)} dead letter(s)")
    return 0


@dlq.command(name="replay")
@click.argument("execution_id")
@target_options(kafka=True, api=True)
@json_option
def replay_dead_execution(target: Target, as_json: bool, execution_id: str) -> int:
    """Run a dead execution again: attempt 1, trigger REPLAY, the same execution id."""
    if target.token is not None:
        with ApiClient(target.api_url, token=target.token) as api:
            answer = api.post(f"/api/dead-letter/{quote(execution_id, safe='')}/replay")
        if as_json:
            print_json(answer)
        else:
            click.echo(f"replayed {answer['execution_id']} (attempt 1) at {answer['fire_at']}")
        return 0
    from streams.codec import Codec
    from streams.dlq import replay

    kafka = target.kafka_settings(KafkaSettings())
    event = replay(kafka, Codec.from_directory(), execution_id)
    if as_json:
        print_json(jsonable(event))
        return 0
    click.echo(
        f"replayed {event['execution_id']} (handler {event['handler']}, priority "
        f"{event['priority']}) at {event['emitted_at_ms']}"
    )
    return 0


def _list_over_api(target: Target, as_json: bool, limit: int | None) -> int:
    """``dlq list`` through the API: the token's tenant's dead letters, newest first."""
    items: list[dict[str, Any]] = []
    cursor = None
    with ApiClient(target.api_url, token=target.token) as api:
        while limit is None or len(items) < limit:
            page = api.get("/api/dead-letter", {"cursor": cursor, "limit": 500})
            items.extend(page["items"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
    items = items if limit is None else items[:limit]
    if as_json:
        print_json({"items": items})
        return 0
    for item in items:
        click.echo(
            f"{item['dead_at']} {item['kind']} {item['execution_id']} handler={item['handler']} "
            f"attempts={item['attempts']} error={item['last_error']!r}"
        )
    click.echo(f"{len(items)} dead letter(s)")
    return 0
