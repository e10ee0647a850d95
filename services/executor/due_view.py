"""DueEvents read for running them: the fields a run needs, without fastavro on the hot path.

:class:`DueReader` parses the Avro single-object encoding of a DueEvent written with the
layout of ``due_event.v1.avsc`` field by field into a :class:`DueView`: the values a run
needs (ids, handler, payload, timeout, priority, trigger) and the raw bytes of the fields
an ExecutionResult repeats (execution_id and job_id, scheduled_for_ms, attempt,
job_version), which :mod:`services.executor.result_bytes` splices into results unchanged.

Consecutive DueEvents mostly repeat runs of fields: job_version through attempt (one
instant's fires), handler through tenant (one kind of job), emitted_at_ms (one emitting
batch). The reader keeps the bytes of the last runs it parsed with their values, and a
record holding the same bytes at the same place reads them from there: Avro encodings are
prefix-free, so equal bytes read as equal values and end at the same place. Most often
everything after the ids is the last record's (one instant's fires of one job kind): one
comparison stands for all of it. ~1.1 us a record here (1.3 with the runs alone) instead of
~3 us.

Anything the fast parser does not take exactly (another writer schema, a non-empty attempt
``history``, a truncated or corrupt body, trailing bytes, a bad enum index) goes through
``Codec.decode``, so a view is made either from exactly what fastavro would read or the
record is refused with the codec's own :class:`DecodeError`. At start-up the reader parses
probe records covering every enum symbol, long and unicode strings and extreme numbers and
compares them with ``Codec.decode``; if any differs (the writer schema changed), every
record goes through the codec. ``tests/services/executor/test_due_view.py`` checks the
fast path against fastavro for random and mutated records, read alone and right after a
similar record (the cached runs).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from streams.avro_binary import avro_long, avro_string
from streams.bounds import Check
from streams.codec import HEADER_LEN, Codec, RecordKind
from streams.exceptions import InvalidRecordError
from streams.fast_path import FastPath
from streams.records import Trigger
from streams.topics import Priority

PRIORITIES: tuple[Priority, ...] = tuple(Priority)
"""Priority symbols in the order of the schema's ``Priority`` enum."""
TRIGGERS: tuple[str, ...] = tuple(t.value for t in Trigger)
"""Trigger symbols in the order of the schema's ``Trigger`` enum."""

# One canonical varint: the shortest encoding (a last byte of 0 only when it is the only
# one) of at most 64 bits, so the raw bytes equal what fastavro writes for the value.
_VARINT = rb"([\x00-\x7f]|[\x80-\xff]{1,8}[\x01-\x7f]|[\x80-\xff]{9}\x01)"
# job_version, scheduled_for_ms, fire_at_ms, attempt
_FOUR_LONGS = re.compile(_VARINT * 4, re.DOTALL)
# timeout_ms, priority, retry {max_attempts, initial_backoff_ms, multiplier (8 bytes),
# max_backoff_ms, jitter_ratio (8 bytes)}, trigger
_TIMEOUT_TO_TRIGGER = re.compile(
    _VARINT * 4 + rb"[\x00-\xff]{8}" + _VARINT + rb"[\x00-\xff]{8}" + _VARINT, re.DOTALL
)
_ONE_LONG = re.compile(_VARINT, re.DOTALL)
_CACHED_RUNS = 4
_DOUBLE = struct.Struct("<d").unpack_from
# The bounded fields, by where the reader checks them: the ids per record, the longs when
# they are decoded (not taken over from the last record), the run handler..tenant when it is
# parsed (not a cached run).
_ID_FIELDS = ("execution_id", "job_id")
_LONG_FIELDS = ("scheduled_for_ms", "fire_at_ms", "attempt")
_RUN_FIELDS = ("handler", "timeout_ms", "retry", "tenant")


def _raise_if_invalid(reason: str | None) -> None:
    if reason is not None:
        raise InvalidRecordError(reason)


# The bytes of job_version .. attempt; their raw job_version, scheduled_for_ms and attempt,
# and the values of scheduled_for_ms, attempt and fire_at_ms.
_Longs = tuple[bytes, tuple[bytes, bytes, bytes, int, int, int]]
# handler, payload, timeout_ms, priority, trigger index
_RunFields = tuple[bytes, bytes, int, Priority, int]


class _NotFastError(Exception):
    """The fast parser does not take this record; the codec decides."""


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


_new_view = tuple.__new__  # DueView(...) without the Python-level __new__ of a NamedTuple


def decode_long(raw: bytes) -> int:
    """The value of one Avro int or long varint (``raw`` holds exactly its bytes)."""
    value = shift = 0
    for byte in raw:
        value |= (byte & 0x7F) << shift
        shift += 7
    return (value >> 1) ^ -(value & 1)


def _length(data: bytes, pos: int) -> tuple[int, int]:
    """A string or bytes length at ``pos`` and where its content starts."""
    byte = data[pos]
    if byte < 0x80:
        if byte & 1:
            raise _NotFastError
        return byte >> 1, pos + 1
    match = _ONE_LONG.match(data, pos)
    if match is None:
        raise _NotFastError
    length = decode_long(match.group(1))
    if length < 0 or length > len(data):  # a corrupt length: past any position (the codec says)
        raise _NotFastError
    return length, match.end()


class DueReader:
    """Reads DueEvents into :class:`DueView` s: the fast parser, or the codec when it must."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        self._header = b"\xc3\x01" + codec.writer_fingerprint(RecordKind.DUE_EVENT)
        self._priority_of = {p.value: p for p in Priority}
        self._trigger_of = {symbol: i for i, symbol in enumerate(TRIGGERS)}
        self._reset_runs()
        # The bounds of schemas/bounds.json: the ids per record; the view's other fields when
        # the record is parsed in full (a record whose bytes after the ids are the last one's
        # was checked then); the fields a view does not hold when their run of bytes is
        # parsed (a record breaking one of those goes to the codec, which raises
        # InvalidRecordError with the reason).
        name = codec.record_name(RecordKind.DUE_EVENT)
        self._check_ids: Check | None = None
        self._check_longs: Check | None = None
        self._check_run: Check | None = None
        self._check_version: Check | None = None
        self._check_emitted: Check | None = None
        self.fast = True
        self.fast = all(self._agrees(r) for r in probe_records())
        self.fast_path = FastPath(
            "the fast DueEvent reader (services/executor/due_view.py)", self.fast
        )
        self._check_ids = codec.bounds.checker(name, fields=_ID_FIELDS, attribute=True)
        self._check_longs = codec.bounds.checker(name, fields=_LONG_FIELDS)
        self._check_run = codec.bounds.checker(name, fields=_RUN_FIELDS)
        # job_version differs per job: when its bound is "not negative" alone, the sign bit
        # of its raw varint (zig-zag) says it, with no decode.
        self._version_sign_only = dict(codec.bounds.field_bound(name, "job_version")) == {"min": 0}
        self._check_version = codec.bounds.checker(name, fields=("job_version",))
        self._check_emitted = codec.bounds.checker(name, fields=("emitted_at_ms",))
        self._reset_runs()

    def read(self, value: bytes) -> DueView:
        """The view of one DueEvent; raises :class:`DecodeError` when it is not one, and its
        subclass :class:`InvalidRecordError` when it breaks a bound (``schemas/bounds.json``)."""
        if self.fast and value.startswith(self._header):
            try:
                return self._parse(value)
            except (_NotFastError, IndexError, UnicodeDecodeError, ValueError, OverflowError):
                pass  # the codec decides: a record it reads, or its DecodeError
        self.fast_path.fell_back()
        return self.from_record(self._codec.decode(RecordKind.DUE_EVENT, value), value)

    def _reset_runs(self) -> None:
        """Forget the runs parsed (the probes' are unchecked)."""
        # The last runs of fields parsed (their bytes and values): consecutive DueEvents
        # mostly repeat them (one instant's fires; one job kind's handler through tenant).
        self._last_longs: _Longs | None = None
        # emitted_at_ms and the empty history, and the raw emitted_at_ms (never matched
        # until a record's end was read and checked)
        self._last_end = (b"", b"")
        self._runs: list[tuple[bytes, _RunFields]] = []
        # The bytes after the ids of the last record parsed in full and the view's fields
        # they hold (scheduled_for_ms on); empty until then (a record never has an empty one).
        self._last_tail: tuple[bytes, tuple[Any, ...]] = (b"", ())

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

    def _parse(self, data: bytes) -> DueView:
        # String lengths under 64 take one byte: read inline, _length() for the rest.
        pos = HEADER_LEN
        length = data[pos]
        pos += 1
        if length > 0x7F or length & 1:
            length, pos = _length(data, HEADER_LEN)
        else:
            length >>= 1
        start = pos
        pos += length
        execution_id = data[start:pos].decode()
        length = data[pos]
        pos += 1
        if length > 0x7F or length & 1:
            length, pos = _length(data, pos - 1)
        else:
            length >>= 1
        start = pos
        pos += length
        key = data[start:pos]
        raw_ids = data[HEADER_LEN:pos]
        # Avro items are prefix-free: bytes that start with a run of items read before
        # read as exactly those items, so a cached run stands for its parse. Most often
        # everything after the ids is the last record's (one instant's fires of one kind).
        tail, values = self._last_tail
        if len(data) - pos == len(tail) and tail and data.endswith(tail):
            view = _new_view(DueView, (data, execution_id, key.decode(), key, raw_ids, *values))
            if self._check_ids is not None:
                _raise_if_invalid(self._check_ids(view))
            return view
        ids_end = pos
        longs = self._last_longs
        if longs is None or not data.startswith(longs[0], pos):
            longs = self._read_longs(data, pos)
        raw_version, raw_scheduled, raw_attempt, scheduled, attempt, fire_at = longs[1]
        pos += len(longs[0])
        fields = None
        for run, cached in self._runs:
            if data.startswith(run, pos):
                pos += len(run)
                fields = cached
                break
        if fields is None:
            pos, fields = self._read_run(data, pos)
        handler, payload, timeout, priority, trigger = fields
        # The end: emitted_at_ms, an empty history (block count 0) and nothing after it.
        end, raw_emitted = self._last_end
        if len(data) - pos != len(end) or not data.endswith(end):
            raw_emitted = self._read_end(data, pos)
        values = (
            scheduled,
            raw_scheduled,
            attempt,
            raw_attempt,
            raw_version,
            fire_at,
            handler,
            payload,
            timeout,
            priority,
            trigger,
            raw_emitted,
            None,
        )
        view = _new_view(DueView, (data, execution_id, key.decode(), key, raw_ids, *values))
        if self._check_ids is not None:
            _raise_if_invalid(self._check_ids(view))
        self._last_tail = (data[ids_end:], values)  # only a checked record's
        return view

    def _read_end(self, data: bytes, pos: int) -> bytes:
        """Check that emitted_at_ms and an empty history end the record at ``pos``;
        returns the raw emitted_at_ms."""
        emitted = _ONE_LONG.match(data, pos)
        if emitted is None or emitted.end() != len(data) - 1 or data[-1] != 0:
            raise _NotFastError
        raw_emitted = emitted.group(1)
        if self._check_emitted is not None and self._check_emitted(
            {"emitted_at_ms": decode_long(raw_emitted)}
        ):
            raise _NotFastError  # the codec raises InvalidRecordError with the reason
        self._last_end = (data[pos:], raw_emitted)
        return raw_emitted

    def _read_longs(self, data: bytes, pos: int) -> _Longs:
        """Parse job_version, scheduled_for_ms, fire_at_ms and attempt at ``pos``."""
        longs = _FOUR_LONGS.match(data, pos)
        if longs is None:
            raise _NotFastError
        raw_version, raw_scheduled, raw_fire_at, raw_attempt = longs.groups()
        check_version = self._check_version
        if check_version is not None:
            if self._version_sign_only:
                if raw_version[0] & 1:
                    raise _NotFastError  # negative: the codec raises InvalidRecordError
            elif check_version({"job_version": decode_long(raw_version)}):
                raise _NotFastError  # the codec raises InvalidRecordError with the reason
        # The run differs from the last one, mostly by job_version alone (one instant's
        # jobs): values of raw bytes seen last are taken over (they were checked), not
        # decoded again.
        last = self._last_longs
        fresh = last is None
        if last is not None and last[1][1] == raw_scheduled:
            scheduled = last[1][3]
        else:
            scheduled = decode_long(raw_scheduled)
            fresh = True
        if last is not None and last[1][2] == raw_attempt:
            attempt = last[1][4]
        else:
            attempt = decode_long(raw_attempt)
            fresh = True
        # fire_at_ms is scheduled_for_ms unless jittered
        fire_at = scheduled
        if raw_fire_at != raw_scheduled:
            fire_at = decode_long(raw_fire_at)
            fresh = True
        elif last is not None and fire_at != last[1][5]:
            fresh = True  # the last record's was jittered: this one was not checked yet
        if fresh and self._check_longs is not None:
            values = {"scheduled_for_ms": scheduled, "fire_at_ms": fire_at, "attempt": attempt}
            if self._check_longs(values):
                raise _NotFastError  # the codec raises InvalidRecordError with the reason
        parsed = (
            data[pos : longs.end()],
            (raw_version, raw_scheduled, raw_attempt, scheduled, attempt, fire_at),
        )
        self._last_longs = parsed
        return parsed

    def _read_run(self, data: bytes, pos: int) -> tuple[int, _RunFields]:
        """Parse handler through tenant at ``pos``; returns the end and the fields."""
        begin = pos
        length, pos = _length(data, pos)
        start = pos
        pos += length
        handler = data[start:pos]
        handler.decode()  # fastavro refuses invalid UTF-8 in a string
        length, pos = _length(data, pos)
        start = pos
        pos += length
        payload = data[start:pos]
        tail = _TIMEOUT_TO_TRIGGER.match(data, pos)
        if tail is None:
            raise _NotFastError
        raw_timeout, raw_priority, _, _, _, raw_trigger = tail.groups()
        priority, trigger = raw_priority[0], raw_trigger[0]
        if priority > 4 or priority & 1 or trigger > 10 or trigger & 1:
            raise _NotFastError  # not an index of the enum (zig-zag: even bytes are >= 0)
        length, pos = _length(data, tail.end())
        start = pos
        pos += length
        tenant = data[start:pos].decode()  # validated (and checked against its bounds)
        if pos > len(data):
            raise _NotFastError  # truncated: a slice would not tell
        if self._check_run is not None and self._check_run(
            {
                "handler": handler.decode(),
                "timeout_ms": decode_long(raw_timeout),
                "retry": {
                    "max_attempts": decode_long(tail.group(3)),
                    "initial_backoff_ms": decode_long(tail.group(4)),
                    "multiplier": _DOUBLE(data, tail.end(4))[0],
                    "max_backoff_ms": decode_long(tail.group(5)),
                    "jitter_ratio": _DOUBLE(data, tail.end(5))[0],
                },
                "tenant": tenant,
            }
        ):
            raise _NotFastError  # the codec raises InvalidRecordError with the reason
        fields = (
            handler,
            payload,
            decode_long(raw_timeout),
            PRIORITIES[priority >> 1],
            trigger >> 1,
        )
        self._runs = [(data[begin:pos], fields), *self._runs[: _CACHED_RUNS - 1]]
        return pos, fields

    def _agrees(self, record: Mapping[str, Any]) -> bool:
        value = self._codec.encode(RecordKind.DUE_EVENT, record)
        expected = self.from_record(
            self._codec.decode(RecordKind.DUE_EVENT, value, check=False), value
        )
        try:
            return self._parse(value) == expected._replace(record=None)
        except (_NotFastError, IndexError, UnicodeDecodeError):
            return False


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


def probe_records() -> list[dict[str, Any]]:
    """DueEvents covering every enum symbol, short and long strings, extreme numbers."""
    records = []
    for i, priority in enumerate(Priority):
        for j, trigger in enumerate(Trigger):
            some = (i + j) % 2 == 0
            records.append(
                {
                    "execution_id": f"jöb-{i}@{-(10**12) - j}" * (1 + 10 * j),
                    "job_id": "" if j == 1 else f"jöb-{i}" * (j + 1) * 20,
                    "job_version": 2**63 - 1 if some else -(2**63),
                    "scheduled_for_ms": -(10**12) - j if some else 2**62 + i,
                    "fire_at_ms": 63 + j,
                    "attempt": -(2**31) if j == 2 else 2**31 - 1 if some else 64 * j + i,
                    "handler": "a.b" * (j * 30 + 1),
                    "payload": bytes(range(256))[: 70 * j],
                    "timeout_ms": 0 if j == 3 else 10**6 * i - 1,
                    "priority": priority.value,
                    "retry": {
                        "max_attempts": 3 + i,
                        "initial_backoff_ms": -j,
                        "multiplier": float("inf") if some else -0.5,
                        "max_backoff_ms": 2**40,
                        "jitter_ratio": 0.1 * j,
                    },
                    "trigger": trigger.value,
                    "tenant": "tën" * (20 * i),
                    "emitted_at_ms": 1_780_000_000_123 + i * j,
                    "history": [],
                }
            )
    return records
