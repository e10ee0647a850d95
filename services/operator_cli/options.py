"""Options shared by the operator commands: where the cluster is (``--api``, ``--bootstrap``,
``--namespace``, ``--profile``, each with its environment variable), the API's ``--token``
and ``--json``.

The environment is read here, when a command runs (its entry point), never at import.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from services.operator_cli.config import Given, resolve_target
from services.operator_cli.exceptions import RefusedError
from services.operator_cli.profile import PROFILE_ENV, profile_path, read_profile
from streams.exceptions import KafkronError

F = TypeVar("F", bound=Callable[..., Any])

API_ENV = "KAFKRON_API_URL"
BOOTSTRAP_ENV = "KAFKRON_BOOTSTRAP_SERVERS"
NAMESPACE_ENV = "KAFKRON_NAMESPACE"
TOKEN_ENV = "KAFKRON_TOKEN"

_PROFILE_HELP = (
    "the local profile 'kafkron up' writes (default $XDG_CONFIG_HOME/kafkron/profile.json, "
    "else ~/.config/kafkron/profile.json); flags and environment win over it"
)


_TARGET_OPTIONS = [
    ("api_url", "--api", API_ENV),
    ("bootstrap", "--bootstrap", BOOTSTRAP_ENV),
    ("namespace", "--namespace", NAMESPACE_ENV),
    ("token", "--token", TOKEN_ENV),
]


def _given(ctx: click.Context, name: str, flag: str, env: str, value: str | None) -> Given:
    """What a flag or its environment variable gave (a command without the option: None)."""
    source = ctx.get_parameter_source(name)
    return Given(value, env if source is ParameterSource.ENVIRONMENT else flag)


def target_options(*, api: bool = False, kafka: bool = False) -> Callable[[F], F]:
    """Add the options saying where the cluster is; the command gets ``target: Target``."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def with_target(*args: Any, **kwargs: Any) -> Any:
            ctx = click.get_current_context()
            named = kwargs.pop("profile")
            path = named if named is not None else profile_path(os.environ)
            given = {
                name: _given(ctx, name, flag, env, kwargs.pop(name, None))
                for name, flag, env in _TARGET_OPTIONS
            }
            target = resolve_target(
                api_url=given["api_url"],
                bootstrap_servers=given["bootstrap"],
                namespace=given["namespace"],
                profile=read_profile(path),
                profile_path=path,
                token=given["token"],
            )
            return command(*args, target=target, **kwargs)

        decorated: Callable[..., Any] = with_target
        decorated = click.option(
            "--profile",
            type=click.Path(dir_okay=False, path_type=Path),
            envvar=PROFILE_ENV,
            show_envvar=True,
            help=_PROFILE_HELP,
        )(decorated)
        if kafka:
            decorated = click.option(
                "--namespace",
                envvar=NAMESPACE_ENV,
                show_envvar=True,
                help="topic namespace (else the profile's, else 'kafkron.')",
            )(decorated)
            decorated = click.option(
                "--bootstrap",
                envvar=BOOTSTRAP_ENV,
                show_envvar=True,
                help="Kafka bootstrap servers (else the profile's, else 127.0.0.1:9092); "
                "librdkafka options come from KAFKRON_LIBRDKAFKA (JSON)",
            )(decorated)
        if api:
            decorated = click.option(
                "--token",
                envvar=TOKEN_ENV,
                show_envvar=True,
                help="the API's bearer token, when it has tokens (else the profile's token)",
            )(decorated)
            decorated = click.option(
                "--api",
                "api_url",
                envvar=API_ENV,
                show_envvar=True,
                help="URL of the kafkron REST API (else the profile's, else http://127.0.0.1:8080)",
            )(decorated)
        return decorated  # type: ignore[return-value]

    return decorate


def json_option(command: F) -> F:
    """Add ``--json``: print JSON for scripts (a refusal too: ``{"error", "status_code"}`` on
    stdout, exit code 1) instead of tables and sentences."""

    @functools.wraps(command)
    def with_json(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except KafkronError as exc:
            if kwargs.get("as_json"):
                status = exc.status_code if isinstance(exc, RefusedError) else None
                click.echo(json.dumps({"error": str(exc), "status_code": status}))
            raise

    option = click.option(
        "--json", "as_json", is_flag=True, help="print JSON for scripts instead of tables"
    )
    return option(with_json)  # type: ignore[return-value]
