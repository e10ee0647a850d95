"""Moving every job of a namespace to a new one (with more partitions), each fire once.

A cut-over instant splits every job's fires (:mod:`streams.migration.plan`): the old
namespace keeps firing those before it and drains, the new one fires those from it on. The
old namespace must have applied its side of the cut before any fire at or after the
cut-over could be emitted there, so the order is fixed: cut the old namespace, see its
timers apply the cut, then copy the jobs into the new one. :meth:`NamespaceMigration.start`
runs these steps; each ends by saving the migration's phase (:mod:`.progress`), and a
migration that stopped anywhere is resumed (:meth:`NamespaceMigration.resume`) by repeating
the steps of its phase, whose writes repeat harmlessly (the same records, the same
versions: a timer ignores a version it has).

1. Check: two namespaces; a timer group running in the old one; the new one's topics
   created with their partition count, its ``jobs`` topic empty. Nothing written before.
2. Snapshot the old ``jobs`` topic up to its end offsets (the latest record of each job).
3. Plan: the cut-over is the broker's clock now + ``cutover_in_s``; the deadline for step
   6 is the cut-over minus the largest jitter of a job with fires from the cut-over on
   (it may fire that early) minus ``margin_s`` (the timers fire ahead,
   ``KAFKRON_TIMER_FIRE_AHEAD_MS``, and clocks differ by their error bound).
4. Write the cut to the old ``jobs``: each SPLIT job's next version ends at the cut-over,
   each MOVES job's tombstone; wait for every delivery (``acks=all``).
5. Check that nothing but the cut reached the old ``jobs`` since the snapshot (writers
   must be stopped; a timer's tombstone of a finished one-off is fine).
6. Wait, until the deadline, for the old timer group's committed offsets to pass the cut on
   every partition it touched: a timer commits its input offsets in the transaction that
   holds its state (docs/architecture.md), so it then fires nothing from the cut-over on.
   If 5 or 6 fails, roll back: every cut job's record as it was, as the version after the
   cut's and stamped like it (a timer that applied the cut then catches up a tick it
   skipped); the migration ends ROLLED_BACK, and the new namespace was never written.
7. Copy the jobs into the new ``jobs`` (its partition count places each by its key).
8. Wait, until the cut-over at most, for the new timer group to take them; when it does
   not, the new namespace's first fires come late, by each job's catch-up policy.
9. Check again for records other than the cut on the old ``jobs``: a job written there
   after the snapshot is missing from the new namespace, and is reported.

The old namespace then drains: its timers, dag processors and executors run until
``drain_by_ms`` (the cut-over plus the longest a fire before it can take: attempts,
backoffs, jitter, a DAG run's wait).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from streams import clock
from streams.admin import ensure_topics
from streams.codec import Codec, RecordKind
from streams.exceptions import DecodeError
from streams.migration.exceptions import MigrationRefusedError, MigrationRolledBackError
from streams.migration.jobs_topic import (
    JobsSnapshot,
    JobsWriter,
    committed_offsets,
    end_offsets,
    group_members,
    read_range,
)
from streams.migration.plan import (
    JobMove,
    JobRecord,
    Placement,
    drain_horizon_ms,
    leaves_fires_in_old,
    plan_move,
    restore_record,
)
from streams.migration.progress import STATE_FILE, MigrationState, Phase
from streams.settings import KafkaSettings
from streams.topics import TopicNames

log = logging.getLogger(__name__)

TIMER_GROUP = "timer"
"""The timers' consumer group under a namespace (``TimerSettings.group_id``)."""


@dataclass(frozen=True)
class MigrationOptions:
    """How a new migration plans its cut-over."""

    cutover_in_s: float = 60.0
    margin_s: float = 5.0
    poll_s: float = 0.25


@dataclass
class PlanSummary:
    """What the plan does, counted over the snapshot."""

    jobs: Counter[Placement] = field(default_factory=Counter)
    undecodable: int = 0
    cut_records: int = 0
    copies: int = 0
    max_jitter_ms: int = 0  # of jobs with fires from the cut-over on
    drain_horizon_ms: int = 0  # of jobs leaving fires in the old namespace


@dataclass
class MigrationReport:
    """Where a migration ended, and what an operator needs next."""

    state: MigrationState
    summary: PlanSummary
    new_timers_took_copies: bool | None = None
    late_writes: list[str] = field(default_factory=list)

    @property
    def drain_by_ms(self) -> int:
        """Until when the old namespace's services must run."""
        return self.state.cutover_ms + self.summary.drain_horizon_ms


class NamespaceMigration:
    """One migration from the namespace of ``old``, with its state in ``work_dir``."""

    def __init__(
        self,
        old: KafkaSettings,
        work_dir: Path,
        say: Callable[[str], None] = log.info,
        codec: Codec | None = None,
    ) -> None:
        self.old = old
        self.work_dir = work_dir
        self._say = say
        self._codec = codec if codec is not None else Codec.from_directory()
        self._snapshot: JobsSnapshot | None = None

    def start(
        self, new_namespace: str, partitions: int, options: MigrationOptions, dry_run: bool = False
    ) -> MigrationReport:
        """Plan a migration to ``new_namespace`` with ``partitions`` and run it. A dry run
        plans and reports, writing nothing to Kafka (its snapshot stays in ``work_dir``)."""
        new = self.old.model_copy(update={"namespace": new_namespace, "partitions": partitions})
        self._check_start(new, dry_run)  # 1
        try:
            ends = self._take_snapshot()  # 2
            state, summary = self._plan(new, ends, options)  # 3
            if dry_run:
                return MigrationReport(state, summary)
            state.save(self.work_dir)
            return self._proceed(state, summary, options.poll_s)
        finally:
            self.close()

    def resume(self, poll_s: float = MigrationOptions.poll_s) -> MigrationReport:
        """Go on with the migration saved in ``work_dir`` from its phase."""
        state = MigrationState.load(self.work_dir)
        if state.old_namespace != self.old.namespace:
            raise MigrationRefusedError(
                f"the migration in {self.work_dir} moves namespace {state.old_namespace!r}, "
                f"not {self.old.namespace!r}: give it its namespace (--namespace)"
            )
        try:
            return self._proceed(state, self._summarize(state), poll_s)
        finally:
            self.close()

    def close(self) -> None:
        if self._snapshot is not None:
            self._snapshot.close()
            self._snapshot = None

    def new_settings(self, state: MigrationState) -> KafkaSettings:
        return self.old.model_copy(
            update={"namespace": state.new_namespace, "partitions": state.partitions}
        )

    # Steps 1-3 -------------------------------------------------------------------------

    def _check_start(self, new: KafkaSettings, dry_run: bool) -> None:
        old_ns, new_ns = self.old.namespace, new.namespace
        if old_ns == new_ns:
            raise MigrationRefusedError(f"the new namespace is the old one ({old_ns!r})")
        if (self.work_dir / STATE_FILE).exists():
            raise MigrationRefusedError(
                f"{self.work_dir} holds a migration already: resume it (--resume "
                f"{self.work_dir}) or remove the directory"
            )
        end_offsets(self.old, TopicNames(old_ns).jobs)  # the old namespace exists
        if group_members(self.old, old_ns + TIMER_GROUP) == 0:
            raise MigrationRefusedError(
                f"no timer runs in {old_ns} (group {old_ns}{TIMER_GROUP} has no member): its "
                "timers must apply the cut before the cut-over, and then fire what stays "
                "there. Start them, and run the migration again. Nothing was written."
            )
        if not dry_run:
            for report in ensure_topics(new):  # refuses other partition counts
                if report.created:
                    self._say(f"created {report.name} ({report.partitions} partitions)")
        jobs = TopicNames(new_ns).jobs
        written = sum(end_offsets(new, jobs).values()) if not dry_run else 0
        if written:
            raise MigrationRefusedError(
                f"{jobs} holds {written} records already: a migration copies into an empty "
                "namespace. Pick another namespace, or delete that one's topics. Nothing "
                "was written."
            )

    def _take_snapshot(self) -> dict[int, int]:
        topic = TopicNames(self.old.namespace).jobs
        ends = end_offsets(self.old, topic)
        shutil.rmtree(self.work_dir / "snapshot", ignore_errors=True)  # of a start refused
        read, keyless = self._open_snapshot().fill(read_range(self.old, topic, {}, ends))
        self._say(f"read {read:,} records of {topic} up to offsets {ends}")
        if keyless:
            self._say(f"{keyless} records without a key skipped (not jobs)")
        return ends

    def _plan(
        self, new: KafkaSettings, ends: dict[int, int], options: MigrationOptions
    ) -> tuple[MigrationState, PlanSummary]:
        stamp_ms = clock.now_ms()
        cutover_ms = stamp_ms + int(options.cutover_in_s * 1000)
        state = MigrationState(
            self.old.namespace, new.namespace, new.partitions, cutover_ms, stamp_ms, 0, ends
        )
        summary = self._summarize(state)
        state.deadline_ms = cutover_ms - summary.max_jitter_ms - int(options.margin_s * 1000)
        room_ms = state.deadline_ms - clock.now_ms()
        if room_ms < 1_000:
            needed_s = (summary.max_jitter_ms - room_ms) / 1000 + options.cutover_in_s + 10
            raise MigrationRefusedError(
                f"the cut-over leaves the old timers no time to apply the cut (a job's jitter "
                f"is {summary.max_jitter_ms / 1000:.1f} s, the margin {options.margin_s} s): "
                f"give --cutover-in-s {needed_s:.0f} or more. Nothing was written."
            )
        counts = ", ".join(f"{p.value} {n:,}" for p, n in sorted(summary.jobs.items()))
        self._say(
            f"cut-over at {iso_utc(cutover_ms)} ({cutover_ms}); jobs: {counts or 'none'}; "
            f"the old timers must apply the cut by {iso_utc(state.deadline_ms)}"
        )
        return state, summary

    def _summarize(self, state: MigrationState) -> PlanSummary:
        summary = PlanSummary()
        for _, job, move in self._moves(state, summary):
            summary.jobs[move.placement] += 1
            summary.cut_records += move.changes_old
            summary.copies += move.new_record is not None
            if move.placement in (Placement.SPLIT, Placement.MOVES):
                summary.max_jitter_ms = max(summary.max_jitter_ms, job["jitter_ms"])
            if leaves_fires_in_old(move.placement, job):
                summary.drain_horizon_ms = max(summary.drain_horizon_ms, drain_horizon_ms(job))
        return summary

    # Steps 4-9 -------------------------------------------------------------------------

    def _proceed(
        self, state: MigrationState, summary: PlanSummary, poll_s: float
    ) -> MigrationReport:
        report = MigrationReport(state, summary)
        if state.phase is Phase.ROLLED_BACK:
            raise MigrationRefusedError(f"this migration was rolled back: {state.notes[-1:]}")
        if state.phase is Phase.ROLLING_BACK:
            self._roll_back(state, state.notes[-1] if state.notes else "resumed")
        if state.phase in (Phase.PLANNED, Phase.CUT_WRITTEN):
            self._cut(state, poll_s)
        if state.phase in (Phase.CUT_APPLIED, Phase.COPIED):
            report.new_timers_took_copies = self._copy(state, poll_s)
            report.late_writes = self._late_writes(state)  # 9
            self._advance(state, Phase.DONE)
        return report

    def _cut(self, state: MigrationState, poll_s: float) -> None:
        if clock.now_ms() >= state.deadline_ms:
            self._roll_back(state, "the cut's deadline passed before the old timers applied it")
        old_jobs = TopicNames(state.old_namespace).jobs
        writer = JobsWriter(self.old, old_jobs)
        for key, _, move in self._moves(state):  # 4
            if move.delete_old:
                writer.write(key, None)
            elif move.old_record is not None:
                writer.write(key, self._codec.encode(RecordKind.JOB, move.old_record))
        writer.flush()
        self._advance(state, Phase.CUT_WRITTEN)
        self._say(f"wrote the cut to {old_jobs}: {writer.written:,} records")
        late = self._late_writes(state)  # 5
        if late:
            self._roll_back(
                state,
                f"{len(late)} jobs were written to {old_jobs} after it was read "
                f"({', '.join(late[:5])}): stop every writer of the old namespace (its API, "
                "clients) and run the migration again",
            )
        group = state.old_namespace + TIMER_GROUP
        if not self._wait_committed(self.old, group, old_jobs, writer.last_offsets,
                                    state.deadline_ms, poll_s):  # 6  # fmt: skip
            self._roll_back(
                state,
                f"the old timers (group {group}) did not apply the cut by "
                f"{iso_utc(state.deadline_ms)}: they must run and keep up with {old_jobs}; "
                "run the migration again (with a later --cutover-in-s if they are busy)",
            )
        self._advance(state, Phase.CUT_APPLIED)
        left_ms = state.cutover_ms - clock.now_ms()
        self._say(f"the old timers applied the cut, {left_ms / 1000:.1f} s before the cut-over")

    def _copy(self, state: MigrationState, poll_s: float) -> bool:
        new = self.new_settings(state)
        new_jobs = TopicNames(state.new_namespace).jobs
        writer = JobsWriter(new, new_jobs)
        for key, _, move in self._moves(state):  # 7
            if move.new_record is not None:
                writer.write(key, self._codec.encode(RecordKind.JOB, move.new_record))
        writer.flush()
        self._advance(state, Phase.COPIED)
        left_s = (state.cutover_ms - clock.now_ms()) / 1000
        self._say(
            f"copied {writer.written:,} jobs to {new_jobs} ({state.partitions} partitions), "
            f"{left_s:.1f} s before the cut-over"
        )
        group = state.new_namespace + TIMER_GROUP  # 8
        took = group_members(new, group) > 0 and self._wait_committed(
            new, group, new_jobs, writer.last_offsets, max(state.cutover_ms, clock.now_ms()), poll_s
        )
        if not took:
            self._say(
                f"WARNING: the new namespace's timers (group {group}) have not taken the jobs: "
                f"start them (KAFKRON_NAMESPACE={state.new_namespace} KAFKRON_PARTITIONS="
                f"{state.partitions}); fires due before they do come late, by each job's "
                "catch-up policy"
            )
        return took

    def _roll_back(self, state: MigrationState, reason: str) -> None:
        state.notes.append(reason)
        self._advance(state, Phase.ROLLING_BACK)
        writer = JobsWriter(self.old, TopicNames(state.old_namespace).jobs)
        for key, job, move in self._moves(state):
            if move.changes_old:
                restored = restore_record(job, state.stamp_ms)
                writer.write(key, self._codec.encode(RecordKind.JOB, restored))
        writer.flush()
        self._advance(state, Phase.ROLLED_BACK)
        raise MigrationRolledBackError(
            f"migration to {state.new_namespace} rolled back: {reason}. The cut was undone in "
            f"{state.old_namespace} ({writer.written:,} jobs written back as they were); "
            f"nothing was written to {TopicNames(state.new_namespace).jobs}."
        )

    def _late_writes(self, state: MigrationState) -> list[str]:
        """Job ids of records on the old ``jobs`` since the snapshot that are not the cut
        (tombstones of jobs that stay there, a timer's retention, are not counted)."""
        topic = TopicNames(state.old_namespace).jobs
        late: list[str] = []
        records = read_range(self.old, topic, state.snapshot_ends, end_offsets(self.old, topic))
        for _, _, key, value in records:
            if key is None:
                continue
            raw = self._open_snapshot().get(key)
            move = None if raw is None else self._move_of(state, raw)
            if move is None:
                if value is not None:
                    late.append(key.decode(errors="replace"))
                continue
            if value is None and (move.delete_old or move.placement is Placement.STAYS):
                continue
            planned = move.old_record
            if planned is None or value != self._codec.encode(RecordKind.JOB, planned):
                late.append(move.job_id)
        return sorted(set(late))

    def _wait_committed(
        self,
        kafka: KafkaSettings,
        group: str,
        topic: str,
        last_offsets: dict[int, int],
        until_ms: int,
        poll_s: float,
    ) -> bool:
        """True once ``group`` is seen, before ``until_ms`` (the broker's clock), to have
        committed past ``last_offsets`` on each partition; False when it is not by then. An
        answer that arrives at or after ``until_ms`` does not count: what it says may have
        happened after the deadline."""
        partitions = sorted(last_offsets)
        if not partitions:
            return True  # nothing written: nothing to apply
        while clock.now_ms() < until_ms:
            committed = committed_offsets(kafka, group, topic, partitions)
            passed = all(committed.get(p, -1) > last_offsets[p] for p in partitions)
            if passed and clock.now_ms() < until_ms:
                return True
            time.sleep(poll_s)
        return False

    def _advance(self, state: MigrationState, phase: Phase) -> None:
        state.phase = phase
        state.save(self.work_dir)

    def _moves(
        self, state: MigrationState, summary: PlanSummary | None = None
    ) -> Iterator[tuple[bytes, JobRecord, JobMove]]:
        """Each job of the snapshot with its move; undecodable records are counted."""
        for key, raw in self._open_snapshot().items():
            try:
                job = self._codec.decode(RecordKind.JOB, raw)
            except DecodeError:
                if summary is not None:
                    summary.undecodable += 1
                continue
            yield key, job, plan_move(job, state.cutover_ms, state.stamp_ms)

    def _move_of(self, state: MigrationState, raw: bytes) -> JobMove | None:
        try:
            job = self._codec.decode(RecordKind.JOB, raw)
        except DecodeError:
            return None
        return plan_move(job, state.cutover_ms, state.stamp_ms)

    def _open_snapshot(self) -> JobsSnapshot:
        if self._snapshot is None:
            self._snapshot = JobsSnapshot(self.work_dir / "snapshot")
        return self._snapshot


def iso_utc(epoch_ms: int) -> str:
    """``epoch_ms`` as ISO 8601 in UTC, to the millisecond."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_ms / 1000)) + (
        f".{epoch_ms % 1000:03d}Z"
    )
