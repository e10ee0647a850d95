"""``kafkron migrate``: move every job of a namespace to a new one with more partitions,
each fire happening once, in one of the two (``streams/migration/``, README "Growing
partitions"). It talks to Kafka, like ``dlq``: the cluster and the old namespace come from
the flags, the environment or the local profile."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from services.operator_cli.config import Target
from services.operator_cli.exceptions import RefusedError
from services.operator_cli.options import target_options
from streams.settings import KafkaSettings

_EPILOG = (
    "Before: create nothing; start the new namespace's timers, dag processors and executors "
    "(KAFKRON_NAMESPACE=NEW KAFKRON_PARTITIONS=N); stop every writer of the old namespace "
    "(its API, clients). After: point the API and clients at the new namespace; keep the old "
    "one's services running until the time printed. Environment: KAFKRON_LIBRDKAFKA, "
    "KAFKRON_STATE_DIR (the default work directory's parent), KAFKRON_REPLICATION_FACTOR."
)


@click.command(epilog=_EPILOG)
@click.option("--to-namespace", "to_namespace", help="the new namespace, e.g. 'kafkron2.'")
@click.option("--partitions", type=click.IntRange(min=1), help="the new namespace's partitions")
@click.option(
    "--cutover-in-s",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="the cut-over comes this long after the start: fires before it stay in the old "
    "namespace, the rest move; raise it for many jobs or jobs with a large jitter",
)
@click.option(
    "--margin-s",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="the old timers must apply the cut this long before the cut-over (more than their "
    "KAFKRON_TIMER_FIRE_AHEAD_MS)",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="where the migration keeps its snapshot and its state (default "
    "<KAFKRON_STATE_DIR>/migrations/<old>to-<new>)",
)
@click.option(
    "--resume",
    "resume_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="go on with the migration whose work directory this is (after it stopped)",
)
@click.option(
    "--dry-run", is_flag=True, help="read and plan, print what it would do, write nothing"
)
@target_options(kafka=True)
def migrate(
    target: Target,
    to_namespace: str | None,
    partitions: int | None,
    cutover_in_s: float,
    margin_s: float,
    work_dir: Path | None,
    resume_dir: Path | None,
    dry_run: bool,
) -> int:
    """Move every job of the namespace to a new one with more partitions, each fire once.

    The cut-over splits every job's fires: the old namespace keeps those before it (and
    drains), the new one gets the rest. The old timers apply the cut before the jobs are
    copied, so nothing fires twice; a migration that stopped is resumed with --resume.
    """
    from streams.clock import broker_clock
    from streams.migration.cutover import MigrationOptions, NamespaceMigration, iso_utc

    old = target.kafka_settings(KafkaSettings())
    if resume_dir is None and (to_namespace is None or partitions is None):
        raise click.UsageError("give --to-namespace and --partitions (or --resume DIR)")
    with broker_clock(old, "migrate"):
        if resume_dir is not None:
            report = NamespaceMigration(old, resume_dir, say=click.echo).resume()
        elif dry_run:
            assert to_namespace is not None and partitions is not None
            with tempfile.TemporaryDirectory(prefix="kafkron-migrate-") as scratch:
                migration = NamespaceMigration(old, Path(scratch), say=click.echo)
                report = migration.start(
                    to_namespace, partitions, MigrationOptions(cutover_in_s, margin_s), True
                )
        else:
            assert to_namespace is not None and partitions is not None
            folder = work_dir or old.state_dir / "migrations" / f"{old.namespace}to-{to_namespace}"
            click.echo(f"work directory {folder} (resume with --resume {folder})")
            migration = NamespaceMigration(old, folder, say=click.echo)
            report = migration.start(
                to_namespace, partitions, MigrationOptions(cutover_in_s, margin_s)
            )
    state, summary = report.state, report.summary
    click.echo(
        f"{'dry run, nothing written' if dry_run else state.phase.value}: "
        f"{summary.cut_records:,} cut records for {state.old_namespace}, {summary.copies:,} "
        f"jobs for {state.new_namespace}"
        + (f", {summary.undecodable} undecodable records skipped" if summary.undecodable else "")
    )
    click.echo(
        f"next: point the API and clients at {state.new_namespace} (KAFKRON_NAMESPACE="
        f"{state.new_namespace} KAFKRON_PARTITIONS={state.partitions}); keep "
        f"{state.old_namespace}'s timers, dag processors and executors running until "
        f"{iso_utc(report.drain_by_ms)} (its last fires' retries and DAG waits), then stop them"
    )
    if report.late_writes:
        raise RefusedError(
            f"{len(report.late_writes)} jobs were written to {state.old_namespace} after the "
            f"migration read it and are not in {state.new_namespace}: "
            f"{', '.join(report.late_writes[:20])}. Submit them again to the new namespace."
        )
    return 0
