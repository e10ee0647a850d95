"""DueEvents read for running them: the fields a run needs, without fastavro on the hot path.

:class:`DueReader` reads the Avro single-object encoding of a DueEvent into a
:class:`DueView` with the decoder :func:`~streams.avro_reader.generate_reader` derives from
the writer schema: the values a run needs (ids, handler, payload, timeout, priority,
trigger) and the raw bytes of the fields an ExecutionResult repeats (execution_id and
job_id, scheduled_for_ms, attempt, job_version), which
:mod:`services.executor.result_bytes` splices into results unchanged. Nothing is parsed by
hand here: this module chooses the runs of fields the decoder keeps by their bytes
(:data:`_MEMOS`) and the checks that go with them.

Consecutive DueEvents mostly repeat runs of fields: everything after the ids (one instant's
fires of one job kind: one comparison stands for all of it); scheduled_for_ms through
attempt (one instant); handler through tenant (one kind of job); emitted_at_ms (one
emitting batch). The last three are memos inside the first, so a field that differs per
record (job_version) defeats the outer run alone, not the ones around it.

Anything the decoder does not take exactly (another writer schema, a non-empty attempt
``history``, a truncated or corrupt body, trailing bytes, a bad enum index, a varint of 10
bytes) goes through ``Codec.decode``, so a view is made either from exactly what fastavro
would read or the record is refused with the codec's own :class:`DecodeError`. At start-up
the reader reads probe records covering every enum symbol, long and unicode strings and
extreme numbers (each fresh, then again from the kept runs) and compares them with
``Codec.decode``; if any differs, every record goes through the codec.
``tests/services/executor/test_due_view.py`` checks the reader against fastavro for random
and mutated records, read alone and right after a similar record (the kept runs).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from streams.avro_binary import avro_long, avro_string
from streams.avro_reader import GeneratedReader, Memo, generate_reader
from streams.bounds import Check
from streams.codec import HEADER_LEN, SINGLE_OBJECT_MAGIC, Codec, RecordKind
from streams.exceptions import InvalidRecordError, UnsupportedSchemaError
from streams.fast_path import FastPath
from streams.probe_records import probe_records
from streams.records import Trigger
from streams.topics import Priority

PRIORITIES: tuple[Priority, ...] = tuple(Priority)
"""Priority symbols in the order of the schema's ``Priority`` enum."""
TRIGGERS: tuple[str, ...] = tuple(t.value for t in Trigger)
"""Trigger symbols in the order of the schema's ``Trigger`` enum."""

# The fields of the writer schema the runs below were chosen for (and the probes cover): a
# writer schema with others goes through the codec until the reader is proven for it.
_SERVED_FIELDS = (
    "execution_id", "job_id", "job_version", "scheduled_for_ms", "fire_at_ms", "attempt",
    "handler", "payload", "timeout_ms", "priority", "retry", "trigger", "tenant",
    "emitted_at_ms", "history",
)  # fmt: skip
# Runs of fields kept by their bytes, and the fields of each checked when it is parsed: the
# whole tail (one instant's fires of one kind) holding the runs that survive a per-record
# job_version: the longs of one instant, one job kind's fields, one emitting batch's stamp.
_TAIL = ("job_version", "history")
_CHECKED_RUNS = (
    (("scheduled_for_ms", "attempt"), ("scheduled_for_ms", "fire_at_ms", "attempt")),
    (("handler", "tenant"), ("handler", "timeout_ms", "retry", "tenant")),
    (("emitted_at_ms", "emitted_at_ms"), ("emitted_at_ms",)),
)
# Checked per record, on the view: the ids (job_version by its raw varint, below).
_ID_FIELDS = ("execution_id", "job_id")
# The view's values derived from the bytes rather than a field's value.
_RAW = {
    "raw_ids": ("execution_id", "job_id"),
    "raw_scheduled_for_ms": ("scheduled_for_ms", "scheduled_for_ms"),
    "raw_attempt": ("attempt", "attempt"),
    "raw_job_version": ("job_version", "job_version"),
    "raw_emitted_at_ms": ("emitted_at_ms", "emitted_at_ms"),
}
_UTF8 = {"key": "job_id", "handler": "handler"}


class DueView(NamedTuple):
    """One DueEvent as a run needs it; ``raw_*`` are Avro encodings cut from the record."""

    value: bytes  # the whole single-object encoded record
    execution_id: str
    job_id: str
    key: bytes  # job_id as UTF-8: the key of every output
    raw_ids: bytes  # execution_id then job_id, Avro strings
    scheduled_for_ms: int
    raw_scheduled_for_ms: bytes
    attempt: int
    raw_attempt: bytes
    raw_job_version: bytes
    fire_at_ms: int  # when the run may start (the timer may emit it a little earlier)
    handler: bytes  # the handler name as UTF-8 (validated)
    payload: bytes
    timeout_ms: int
    priority: Priority
    trigger: int  # index into TRIGGERS
    raw_emitted_at_ms: bytes
    record: dict[str, Any] | None  # the decoded record when the codec read it, else None


def decode_long(raw: bytes) -> int:
    """The value of one Avro int or long varint (``raw`` holds exactly its bytes)."""
    value = shift = 0
    for byte in raw:
        value |= (byte & 0x7F) << shift
        shift += 7
    return (value >> 1) ^ -(value & 1)


class DueReader:
    """Reads DueEvents into :class:`DueView` s: the generated decoder, or the codec when it
    must (see the module)."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        kind = RecordKind.DUE_EVENT
        self._priority_of = {p.value: p for p in Priority}
        self._trigger_of = {symbol: i for i, symbol in enumerate(TRIGGERS)}
        name = codec.record_name(kind)
        # The bounds of schemas/bounds.json: the ids per record, job_version per record by
        # its raw varint; every other field with its run of bytes, when that is parsed (a
        # record breaking one goes to the codec, which raises InvalidRecordError with the
        # reason).
        self._check_ids: Check = codec.bounds.checker(name, fields=_ID_FIELDS, attribute=True)
        # job_version differs per job: when its bound is "not negative" alone, the sign bit
        # of its raw varint (zig-zag) says it, with no decode.
        self._version_sign_only = dict(codec.bounds.field_bound(name, "job_version")) == {"min": 0}
        self._check_version: Check = codec.bounds.checker(name, fields=("job_version",))
        checks = [codec.bounds.checker(name, fields=fields) for _, fields in _CHECKED_RUNS]
        self._decoder, why_off = self._proven_decoder(checks)
        self.fast = self._decoder is not None
        self.fast_path = FastPath(
            "the fast DueEvent reader (services/executor/due_view.py)", self.fast, why_off
        )
        header = SINGLE_OBJECT_MAGIC + codec.writer_fingerprint(kind)
        self._served_header = header if self.fast else None
        self._read = self._decoder.read if self._decoder is not None else _unserved

    def read(self, value: bytes) -> DueView:
        """The view of one DueEvent; raises :class:`DecodeError` when it is not one, and its
        subclass :class:`InvalidRecordError` when it breaks a bound (``schemas/bounds.json``)."""
        if value[:HEADER_LEN] == self._served_header:
            try:
                view: DueView = self._read(value)
            except (IndexError, ValueError):
                pass  # the codec decides: a record it reads, or its DecodeError
            else:
                reason = self._check_ids(view)
                if reason is not None:
                    raise InvalidRecordError(reason)
                raw_version = view.raw_job_version
                if self._version_sign_only:
                    if not raw_version[0] & 1:
                        return view
                elif self._check_version({"job_version": decode_long(raw_version)}) is None:
                    return view
                # out of bounds: the codec raises InvalidRecordError with the reason
        self.fast_path.fell_back()
        return self.from_record(self._codec.decode(RecordKind.DUE_EVENT, value), value)

    def from_record(self, record: dict[str, Any], value: bytes) -> DueView:
        """The view of a decoded DueEvent record (a writer schema the fast parser lacks)."""
        execution_id, job_id = record["execution_id"], record["job_id"]
        return DueView(
            value,
            execution_id,
            job_id,
            job_id.encode(),
            avro_string(execution_id) + avro_string(job_id),
            record["scheduled_for_ms"],
            avro_long(record["scheduled_for_ms"]),
            record["attempt"],
            avro_long(record["attempt"]),
            avro_long(record["job_version"]),
            record["fire_at_ms"],
            record["handler"].encode(),
            record["payload"],
            record["timeout_ms"],
            self._priority_of[record["priority"]],
            self._trigger_of[record["trigger"]],
            avro_long(record["emitted_at_ms"]),
            record,
        )

    def key_reason(self, key: bytes | None, view: DueView) -> str:
        """Why ``key`` cannot be the Kafka key of ``view``'s record (it is not its job id)."""
        name = self._codec.record_name(RecordKind.DUE_EVENT)
        reason = self._codec.bounds.key_reason(name, key, {"job_id": view.job_id})
        return reason or f"record key {key!r} is not its job id"

    def record(self, view: DueView) -> dict[str, Any]:
        """Every field of the view's DueEvent, as ``Codec.decode`` returns it."""
        if view.record is not None:
            return view.record
        return self._codec.decode(RecordKind.DUE_EVENT, view.value)

    def _generate(self, checks: list[Check] | None) -> GeneratedReader:
        """The decoder of views of the writer schema, its runs checked with ``checks``."""
        memos = [Memo(*_TAIL, last_only=True)]
        for i, (run, _) in enumerate(_CHECKED_RUNS):
            memos.append(Memo(*run, check=None if checks is None else checks[i]))
        schema = self._codec.writer_schema(RecordKind.DUE_EVENT)
        return generate_reader(
            schema,
            fields=DueView._fields,
            memos=memos,
            start=HEADER_LEN,
            as_tuple=DueView,
            raw=_RAW,
            utf8=_UTF8,
            data_as="value",
            constants={"record": None},
            enum_values={"kafkron.Priority": PRIORITIES, "kafkron.Trigger": range(len(TRIGGERS))},
            require={"history": b"\x00"},  # a non-empty history: the codec reads it
            canonical=True,  # the raw bytes are spliced into results as fastavro writes them
        )

    def _proven_decoder(self, checks: list[Check]) -> tuple[GeneratedReader | None, str]:
        """The decoder, if the writer schema is the one served and, without its checks (the
        probes break bounds), it reads every probe as the codec does: fresh, again from the
        runs kept, and after each other probe; else None and why."""
        codec, kind = self._codec, RecordKind.DUE_EVENT
        names = tuple(str(f["name"]) for f in codec.writer_schema(kind)["fields"])
        if names != _SERVED_FIELDS:
            return None, "the DueEvent writer schema has fields its runs were not chosen for"
        try:
            unchecked = self._generate(None)
            decoder = self._generate(checks)
        except UnsupportedSchemaError as exc:
            return None, f"the DueEvent schema has what it cannot read ({exc})"
        # From the schema (every enum symbol, union branch, edge string and number within
        # the bounds); the history empty, as the reader serves only first attempts' records.
        probes = [
            codec.encode(kind, {**record, "history": []})
            for record in probe_records(codec.writer_schema(kind), codec.bounds)
        ]
        try:
            for _ in range(2):
                for value in probes:
                    expected = self.from_record(codec.decode(kind, value, check=False), value)
                    for _ in range(2):
                        if unchecked.read(value) != expected._replace(record=None):
                            return None, ""
        except (IndexError, ValueError):
            return None, ""
        return decoder, ""


def _unserved(data: bytes) -> DueView:
    """The decoder of a reader that is off (never called: it serves no header)."""
    raise ValueError("the fast DueEvent reader is off")


class DueEventMapping(Mapping[str, Any]):
    """A :class:`DueView` as the ``Mapping`` a decoded DueEvent is, decoding on demand.

    ``skip_reason`` and ``entry_after`` read a few fields (trigger, attempt, emitted_at_ms)
    of an event; those come from the view, any other field from the full record.
    """

    __slots__ = ("_full", "_reader", "_view")

    def __init__(self, view: DueView, reader: DueReader) -> None:
        self._view = view
        self._reader = reader
        self._full: dict[str, Any] | None = view.record

    def __getitem__(self, name: str) -> Any:
        view = self._view
        if name == "trigger":
            return TRIGGERS[view.trigger]
        if name == "attempt":
            return view.attempt
        if name == "execution_id":
            return view.execution_id
        if name == "emitted_at_ms":
            return decode_long(view.raw_emitted_at_ms)
        return self.full()[name]

    def full(self) -> dict[str, Any]:
        """The decoded record."""
        if self._full is None:
            self._full = self._reader.record(self._view)
        return self._full

    def __iter__(self) -> Iterator[str]:
        return iter(self.full())

    def __len__(self) -> int:
        return len(self.full())
