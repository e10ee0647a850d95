"""The ``kafkron`` command (click): the root group, ``--version`` and the exit codes; the
operator commands live in ``services/operator_cli/``, the services' in ``services/commands.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

import click

from services import commands
from services.operator_cli import (
    acls_command,
    backfill,
    cluster,
    dead_letters,
    job_actions,
    job_views,
    migrate_command,
    token_commands,
)
from streams.exceptions import KafkronError

HELP = """kafkron: a distributed job scheduler on Apache Kafka.

Jobs: submit, list, show, history, cancel, pause, resume, trigger, backfill (over the REST
API); dlq list|replay (over Kafka). Local cluster: up, broker, topics. Services: timer, dag,
executor, api. API tokens: token add|list|revoke. More partitions: migrate (over Kafka).
Kafka ACLs per service: acls.

Every command finds the cluster that 'kafkron up' started through the profile it writes,
unless its flags (--api, --bootstrap, --namespace) or the environment (KAFKRON_API_URL,
KAFKRON_BOOTSTRAP_SERVERS, KAFKRON_NAMESPACE, KAFKRON_PROFILE) say otherwise. An API with
tokens wants one: --token or KAFKRON_TOKEN (or the profile's).

Exit codes: 0 done, 1 refused (the reason on stderr; with --json also {"error", "status_code"}
on stdout), 2 usage (an unknown command, option or value).
"""

EXIT_DONE, EXIT_REFUSED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def kafkron_version() -> str:
    """The installed distribution's version ("unknown" when run from an uninstalled tree)."""
    try:
        return version("kafkron")
    except PackageNotFoundError:
        return "unknown"


@click.group(
    name="kafkron",
    help=HELP,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(kafkron_version(), "--version", prog_name="kafkron")
def root() -> None:
    """The group of every ``kafkron`` subcommand."""


for _command in (
    *job_actions.COMMANDS,
    *job_views.COMMANDS,
    dead_letters.dlq,
    backfill.backfill,
    *cluster.COMMANDS,
    *token_commands.COMMANDS,
    migrate_command.migrate,
    acls_command.acls,
):
    root.add_command(_command)
for _register in commands.REGISTRARS:
    _register(root)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kafkron`` console script; returns the exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        result = root.main(args, prog_name="kafkron", standalone_mode=False)
    except click.UsageError as exc:
        exc.show()
        return EXIT_USAGE
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return EXIT_INTERRUPTED
    except KafkronError as exc:
        click.echo(f"kafkron: {exc}", err=True)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return result if isinstance(result, int) else EXIT_DONE


if __name__ == "__main__":
    sys.exit(main())
