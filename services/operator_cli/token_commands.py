"""``kafkron token add | list | revoke``: the API's bearer tokens, in the tokens file the API
reads (``KAFKRON_INGEST_TOKENS_FILE``, :mod:`streams.api_tokens`).

``add`` prints the new token once and stores only its salted hash; a running API picks the
change up within a second, without a restart. Rotate a token by adding its successor,
moving the clients to it, then revoking the old one.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from services.operator_cli.options import json_option
from services.operator_cli.output import print_json
from streams.api_tokens import add_token, grants_summary, read_tokens_file, revoke_token
from streams.exceptions import ConfigurationError
from streams.identity import TENANT_PATTERN

TOKENS_FILE_ENV = "KAFKRON_INGEST_TOKENS_FILE"

_file_option = click.option(
    "--file",
    "path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=TOKENS_FILE_ENV,
    show_envvar=True,
    required=True,
    help="the tokens file (the API's KAFKRON_INGEST_TOKENS_FILE)",
)


def _tenant(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not re.fullmatch(TENANT_PATTERN, value):
        raise click.BadParameter(f"not a tenant name ({TENANT_PATTERN})")
    return value


@click.group()
def token() -> None:
    """The API's bearer tokens: each sees one tenant's jobs, or all (--admin)."""


@token.command(name="add")
@click.option("--tenant", callback=_tenant, help="the tenant whose jobs the token may see")
@click.option("--admin", is_flag=True, help="a token that sees every tenant's jobs")
@click.option("--note", default="", help="what or who the token is for (shown by list)")
@_file_option
@json_option
def add(path: Path, tenant: str | None, admin: bool, note: str, as_json: bool) -> int:
    """Make a token, print it once, and store only its salted hash in the file (created
    when missing, readable by its owner only)."""
    if (tenant is None) == (not admin):
        raise click.UsageError("give --tenant NAME or --admin (one of them)")
    secret, entry = add_token(path, tenant, note)
    if as_json:
        print_json({"token": secret, **grants_summary([entry])[0]})
        return 0
    who = "admin (every tenant)" if entry.admin else f"tenant {entry.tenant}"
    click.echo(secret)
    click.echo(
        f"token {entry.id} for {who} added to {path}; it is shown only now: give it to the "
        "client (--token or KAFKRON_TOKEN). A running API accepts it within a second.",
        err=True,
    )
    return 0


@token.command(name="list")
@_file_option
@json_option
def list_tokens(path: Path, as_json: bool) -> int:
    """The file's tokens: id, tenant, note (never the tokens, which are not stored)."""
    if not path.exists():
        raise ConfigurationError(f"tokens file {path} does not exist; 'kafkron token add' makes it")
    entries = grants_summary(read_tokens_file(path).tokens)
    if as_json:
        print_json({"items": entries})
        return 0
    for entry in entries:
        who = "admin" if entry["admin"] else f"tenant {entry['tenant']}"
        click.echo(f"{entry['id']}  {who}  {entry['note']}".rstrip())
    click.echo(f"{len(entries)} token(s)")
    return 0


@token.command(name="revoke")
@click.argument("token_id")
@_file_option
def revoke(path: Path, token_id: str) -> int:
    """Remove token TOKEN_ID (see list); a running API refuses it within a second."""
    if not revoke_token(path, token_id):
        raise ConfigurationError(
            f"tokens file {path} has no token {token_id}; see 'kafkron token list'"
        )
    click.echo(f"token {token_id} revoked")
    return 0


COMMANDS = [token]
