"""From the five-store layout to one store: the old changelogs' state copied into the new one.

Before 2026-12-05 the dag processor kept five stores (``nodes``, ``edges``, ``runs``,
``deadlines``, ``ends``), each with its changelog ``<namespace>changelog.<group>.<store>``.
Now they are key spaces of one store (``scope.py``). A dag processor refuses to start while
an old changelog exists (:func:`refuse_old_changelogs`): starting on the new store alone
would drop every edge, open run and deadline they hold. With every dag process of the
namespace stopped, ``python -m services.dag.store_migration`` (:func:`migrate_old_changelogs`):

1. refuses while the dag group has members (a running processor still writes the old ones);
2. creates the new changelog when missing (the inputs' partition count, compacted);
3. reads each old changelog partition to its end (``read_committed``), keeps each key's last
   value (a tombstone drops it), and produces it under its key space's prefix to the same
   partition of the new changelog, waiting until every record is delivered;
4. deletes the old changelogs.

A crash before 4 leaves the old changelogs: running it again copies the same values again
(the same keys, so compaction keeps one). The processors restore the new store from the new
changelog; the old local store directories (``KAFKRON_STATE_DIR/<group>/<old store>``) are no
longer read and may be deleted. One old changelog's live keys are held in memory at once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from services.dag.scope import KEY_SPACES, OLD_STORES, STORE
from services.dag.settings import DagSettings
from streams.admin import admin_client, existing_partition_counts
from streams.exceptions import KafkronError
from streams.migration.jobs_topic import JobsWriter, end_offsets, group_members, read_range
from streams.state.changelog import changelog_topic, ensure_changelog_topics
from streams.topics import TopicNames

_LOG = logging.getLogger(__name__)
_TIMEOUT_S = 60.0


class OldDagStoresError(KafkronError):
    """Changelogs of the five-store layout exist: their state must be copied first."""


@dataclass
class MigrationReport:
    """What :func:`migrate_old_changelogs` did: live keys copied per old changelog topic."""

    copied: dict[str, int] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)


def old_changelogs(settings: DagSettings) -> list[str]:
    """The five-store layout's changelog topics that still exist, in store order."""
    names = [changelog_topic(settings.kafka, settings.group_id(), s) for s in OLD_STORES]
    existing = existing_partition_counts(admin_client(settings.kafka), names)
    return [name for name in names if name in existing]


def refuse_old_changelogs(settings: DagSettings) -> None:
    """Raise :class:`OldDagStoresError` naming the old changelogs while any exists."""
    old = old_changelogs(settings)
    if old:
        new = changelog_topic(settings.kafka, settings.group_id(), STORE)
        raise OldDagStoresError(
            f"the dag processor keeps its five stores in one store now ({new}), but the old "
            f"layout's changelogs {old} exist and hold live DAG state (edges, open runs, "
            "deadlines). Stop every dag process of this namespace, run 'python -m "
            "services.dag.store_migration' with the same KAFKRON_* environment (it copies "
            "them into the new changelog, then deletes them), then start the dag processes "
            "(README 'DAG runs')."
        )


def migrate_old_changelogs(settings: DagSettings) -> MigrationReport:
    """Copy the old changelogs' live state into the one store's changelog, then delete them."""
    group = settings.group_id()
    if group_members(settings.kafka, group):
        raise OldDagStoresError(
            f"the dag group {group} has members: stop every dag process of this namespace "
            "first (a running one still writes the old changelogs), then run this again"
        )
    report = MigrationReport()
    old = old_changelogs(settings)
    if not old:
        return report
    names = TopicNames(settings.kafka.namespace)
    inputs = [names.jobs, names.job_results, names.dag_signals]
    partitions = ensure_changelog_topics(settings.kafka, group, [STORE], inputs)
    target = changelog_topic(settings.kafka, group, STORE)
    writer = JobsWriter(settings.kafka, target)
    for topic in old:
        ends = end_offsets(settings.kafka, topic)
        if len(ends) != partitions:
            raise OldDagStoresError(
                f"{topic} has {len(ends)} partitions, the inputs {partitions}: its state "
                "cannot be placed; nothing was deleted"
            )
        prefix = KEY_SPACES[topic.rsplit(".", 1)[1]]
        live: dict[tuple[int, bytes], bytes] = {}
        for partition, _, key, value in read_range(settings.kafka, topic, {}, ends):
            if key is None:
                continue
            if value is None:
                live.pop((partition, key), None)
            else:
                live[(partition, key)] = value
        for (partition, key), value in live.items():
            writer.write(prefix + key, value, partition)
        writer.flush(_TIMEOUT_S)
        report.copied[topic] = len(live)
        _LOG.info("copied %d keys of %s into %s", len(live), topic, target)
    _delete_topics(settings, old)
    report.deleted = old
    return report


def _delete_topics(settings: DagSettings, topics: list[str]) -> None:
    """Delete ``topics`` and wait until metadata no longer lists them (a processor started
    next checks for them)."""
    admin = admin_client(settings.kafka)
    futures = admin.delete_topics(topics, request_timeout=_TIMEOUT_S)
    for name, future in futures.items():
        try:
            future.result()
        except Exception as exc:
            raise OldDagStoresError(
                f"copied, but could not delete {name}: {exc}; delete it (the dag processor "
                "refuses to start while it exists) or run the migration again"
            ) from exc
    deadline = time.monotonic() + _TIMEOUT_S
    while existing_partition_counts(admin, topics):
        if time.monotonic() > deadline:
            raise OldDagStoresError(f"deleted {topics}, but metadata still lists them")
        time.sleep(0.1)


def main() -> None:
    """Run the migration with settings from the environment; print what it did."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    report = migrate_old_changelogs(DagSettings())
    if not report.deleted:
        print("no old dag changelogs: nothing to do")
    for topic, count in report.copied.items():
        print(f"{topic}: {count} keys copied, topic deleted")


if __name__ == "__main__":
    main()
