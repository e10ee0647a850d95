"""An ExecutionResult reader ~5x cheaper than the generic codec, for the timer's hot loop.

The timer applies two results per execution (STARTED, SUCCEEDED) and needs three of their
fourteen fields: ``job_id``, ``scheduled_for_ms`` and ``status``. fastavro's generic reader
costs ~12 us a record here; :class:`ResultReader` walks the record field by field, checks
every field as the codec would (lengths, UTF-8, union branches, enum ranges, nothing left
over) but builds only those three values. The fields from ``scheduled_for_ms`` to
``worker_id`` are checked once per distinct byte string and then known by it (an executor's
results of one tick and status share them): most records then cost two id decodes, a dict
lookup and one regular expression over the times after them.

It is exact or unused: it serves only records whose fingerprint is the codec's writer
schema for ExecutionResult when that schema is also the reader schema (no resolution), and
only after proving, at construction, that probe records covering every status, trigger and
union branch read exactly as the codec decodes them. It accepts a record only when it is
sure the codec would accept it with the same values; anything else (a varint longer than
9 bytes, an ``attempt`` outside 32 bits, any record it cannot parse) goes to
:meth:`Codec.decode`, which returns the record or raises the usual :class:`DecodeError`.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from streams.avro_binary import MAX_READ_LONG_BYTES, read_long
from streams.codec import HEADER_LEN, SINGLE_OBJECT_MAGIC, Codec, RecordKind
from streams.exceptions import DecodeError, InvalidRecordError
from streams.fast_path import FastPath
from streams.records import ExecutionStatus, Trigger
from streams.result_probes import result_probes

_STATUS = tuple(status.value for status in ExecutionStatus)
_TRIGGER_COUNT = len(Trigger)
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_MAX_CACHED_HEADS = 4096
_MAX_CACHED_HEAD_BYTES = 128  # an executor's: ~12 bytes and its worker id
_MAX_HEAD_SIZES = 8  # sizes tried per record: executors with worker ids of that many sizes
# Builds a ResultFields without the Python frame of its generated __new__.
_new_fields = tuple.__new__

# The common shape, checked by two regular expressions instead of a Python step per field.
# A varint of at most 9 bytes (what read_long reads); ``attempt`` of at most 4 (28 bits:
# always an Avro int); the status enum index 0-9 and the trigger index 0-5 (zig-zag: the
# even bytes below 20 / 12).
_VARINT = rb"[\x80-\xff]{0,%d}[\x00-\x7f]" % (MAX_READ_LONG_BYTES - 1)
_AFTER_IDS = re.compile(
    b"(" + _VARINT + rb")[\x80-\xff]{0,3}[\x00-\x7f]"
    + b"[" + bytes(range(0, 2 * len(_STATUS), 2)) + b"]"
)  # fmt: skip
_OPTIONAL_LONG = rb"(?:\x00|\x02" + _VARINT + b")"
_TAIL = re.compile(
    _OPTIONAL_LONG * 3 + b"[" + bytes(range(0, 2 * _TRIGGER_COUNT, 2)) + b"]" + _VARINT * 2
)  # started_at_ms, finished_at_ms, next_attempt_at_ms, trigger, job_version, recorded_at_ms


class ResultFields(NamedTuple):
    """The fields of an ExecutionResult that the timer acts on."""

    job_id: str
    scheduled_for_ms: int
    status: str


def fields_of(record: dict[str, Any]) -> ResultFields:
    """The :class:`ResultFields` of a decoded ExecutionResult dict."""
    return ResultFields(record["job_id"], record["scheduled_for_ms"], record["status"])


def _skip_text(data: bytes, pos: int) -> int:
    """The position after the string at ``pos``, checked to be UTF-8 as the codec checks."""
    size, pos = read_long(data, pos)
    end = pos + size
    if size < 0 or end > len(data):
        raise ValueError("bad string length")
    data[pos:end].decode()
    return end


def _skip_optional_text(data: bytes, pos: int) -> int:
    branch = data[pos]
    if branch == 0:
        return pos + 1
    if branch != 2:
        raise ValueError("bad union branch")
    return _skip_text(data, pos + 1)


def _skip_optional_long(data: bytes, pos: int) -> int:
    branch = data[pos]
    if branch == 0:
        return pos + 1
    if branch != 2:
        raise ValueError("bad union branch")
    return read_long(data, pos + 1)[1]


def _read_head(data: bytes, pos: int) -> tuple[int, int, str] | None:
    """The end, ``scheduled_for_ms`` and ``status`` of the fields from ``scheduled_for_ms`` to
    ``worker_id`` of a common-shape result at ``pos``, checked as the codec reads them; None
    for any other shape."""
    after_ids = _AFTER_IDS.match(data, pos)
    if after_ids is None:
        return None
    pos = after_ids.end()
    if data[pos] or data[pos + 1]:  # a reason or an error
        return None
    branch = data[pos + 2]  # worker_id
    if branch == 0:
        end = pos + 3
    elif branch == 2:
        end = _skip_text(data, pos + 3)
    else:
        return None
    return end, read_long(after_ids.group(1), 0)[0], _STATUS[data[pos - 1] >> 1]


class ResultReader:
    """Reads :class:`ResultFields` of ExecutionResult records exactly as the codec decodes them."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        self._header = SINGLE_OBJECT_MAGIC + codec.writer_fingerprint(RecordKind.EXECUTION_RESULT)
        # (scheduled_for_ms, status) by the bytes from scheduled_for_ms to worker_id, and
        # the sizes of those (see _read_common).
        self._heads: dict[bytes, tuple[int, str]] = {}
        self._head_sizes: list[int] = []
        self.enabled = self._resolution_free() and self._proven()
        self.fast_path = FastPath(
            "the fast ExecutionResult reader (streams/result_reader.py)", self.enabled
        )
        self._served_header = self._header if self.enabled else None
        # The bounds (schemas/bounds.json) of the fields read, which are all the timer acts
        # on: a result breaking a bound of another field still settles its execution.
        self._check = codec.bounds.checker(
            codec.record_name(RecordKind.EXECUTION_RESULT),
            fields=("job_id", "scheduled_for_ms"),
            attribute=True,
        )

    def read(self, data: bytes) -> ResultFields:
        """The fields of the ExecutionResult in ``data``; raises :class:`DecodeError` if not one,
        and its subclass :class:`InvalidRecordError` when one of those fields breaks its bound."""
        if data[:HEADER_LEN] == self._served_header:
            try:
                fields = self._read_common(data) or self._read(data)
            except (IndexError, ValueError):
                pass  # the codec names what is wrong with it
            else:
                return self._checked(fields)
        self.fast_path.fell_back()
        record = self._codec.decode(RecordKind.EXECUTION_RESULT, data, check=False)
        return self._checked(fields_of(record))

    def _checked(self, fields: ResultFields) -> ResultFields:
        reason = self._check(fields)
        if reason is not None:
            raise InvalidRecordError(reason)
        return fields

    def _read_common(self, data: bytes) -> ResultFields | None:
        """The fields of a result of the common shape, else None (see :data:`_AFTER_IDS`).

        Both ids shorter than 64 bytes, no reason and no error: every STARTED and SUCCEEDED.
        The fields from ``scheduled_for_ms`` to ``worker_id`` are checked once per distinct
        byte string (:func:`_read_head`) and then known by it: an executor's results of one
        tick and status share them (the times and ``job_version`` after them vary).
        """
        size = data[HEADER_LEN]  # execution_id
        if size & 0x81:  # two varint bytes, or a negative length
            return None
        start = HEADER_LEN + 1
        pos = start + (size >> 1)
        data[start:pos].decode()
        size = data[pos]  # job_id
        if size & 0x81:
            return None
        start = pos + 1
        pos = start + (size >> 1)
        job_id = data[start:pos].decode()
        heads = self._heads
        # A slice cut short by the record's end may equal a shorter head: the times after
        # it are then missing, and the tail does not match.
        for head_size in self._head_sizes:
            known = heads.get(data[pos : pos + head_size])
            if known is not None:
                if _TAIL.fullmatch(data, pos + head_size) is None:
                    return None
                return _new_fields(ResultFields, (job_id, *known))
        head = _read_head(data, pos)
        if head is None or _TAIL.fullmatch(data, head[0]) is None:
            return None
        end, tick_ms, status = head
        self._remember_head(data[pos:end], (tick_ms, status))
        return _new_fields(ResultFields, (job_id, tick_ms, status))

    def _remember_head(self, head: bytes, fields: tuple[int, str]) -> None:
        """Keep a checked head (bounded: a few sizes, a few thousand heads)."""
        if len(head) > _MAX_CACHED_HEAD_BYTES:
            return
        sizes = self._head_sizes
        if len(self._heads) >= _MAX_CACHED_HEADS or (
            len(head) not in sizes and len(sizes) >= _MAX_HEAD_SIZES
        ):
            self._heads.clear()  # the results in flight refill it at once
            sizes.clear()
        if len(head) not in sizes:
            sizes.append(len(head))
        self._heads[head] = fields

    def _read(self, data: bytes) -> ResultFields:
        pos = _skip_text(data, HEADER_LEN)  # execution_id
        size, start = read_long(data, pos)  # job_id
        pos = start + size
        if size < 0 or pos > len(data):
            raise ValueError("bad string length")
        job_id = data[start:pos].decode()
        scheduled_for_ms, pos = read_long(data, pos)
        attempt, pos = read_long(data, pos)
        if not _INT_MIN <= attempt <= _INT_MAX:
            raise ValueError("attempt outside an Avro int")
        index, pos = read_long(data, pos)
        if index < 0:
            raise ValueError("negative enum index")
        status = _STATUS[index]
        pos = _skip_optional_text(data, pos)  # reason
        pos = _skip_optional_text(data, pos)  # error
        pos = _skip_optional_text(data, pos)  # worker_id
        pos = _skip_optional_long(data, pos)  # started_at_ms
        pos = _skip_optional_long(data, pos)  # finished_at_ms
        pos = _skip_optional_long(data, pos)  # next_attempt_at_ms
        trigger, pos = read_long(data, pos)
        if not 0 <= trigger < _TRIGGER_COUNT:
            raise ValueError("trigger index out of range")
        pos = read_long(data, pos)[1]  # job_version
        pos = read_long(data, pos)[1]  # recorded_at_ms
        if pos != len(data):
            raise ValueError("bytes left after the record")
        return ResultFields(job_id, scheduled_for_ms, status)

    def _resolution_free(self) -> bool:
        """True when results of the writer schema decode without schema resolution."""
        kind = RecordKind.EXECUTION_RESULT
        return self._codec.writer_version(kind) == self._codec.reader_version(kind)

    def _proven(self) -> bool:
        """Do probe records covering every branch read exactly as the codec decodes them?"""
        try:
            for probe in _probes():
                data = self._codec.encode(RecordKind.EXECUTION_RESULT, probe)
                expected = self._codec.decode(RecordKind.EXECUTION_RESULT, data, check=False)
                fields = fields_of(expected)
                common = self._read_common(data)
                if expected != probe or self._read(data) != fields or common not in (None, fields):
                    return False
        except (DecodeError, IndexError, ValueError, KeyError):
            return False
        finally:
            self._heads.clear()
            self._head_sizes.clear()
        return True


def _probes() -> list[dict[str, Any]]:
    """Every status and trigger in the common shape and in others: each optional field null
    and not, empty, short and long strings, short and the longest varints read here."""
    records = []
    for i, status in enumerate(ExecutionStatus):
        for j, trigger in enumerate(Trigger):
            some = (i + j) % 2 == 0
            records.append(  # read by _read_common
                {
                    "execution_id": f"j-{j}@{i}",
                    "job_id": f"j-{j}",
                    "scheduled_for_ms": 1_790_000_000_000 + i,
                    "attempt": j,
                    "status": status.value,
                    "reason": None,
                    "error": None,
                    "worker_id": "wörker" if some else None,
                    "started_at_ms": 1_790_000_000_100 if some else None,
                    "finished_at_ms": 1_790_000_000_200 if some else None,
                    "next_attempt_at_ms": None if some else 1_790_000_001_000,
                    "trigger": trigger.value,
                    "job_version": 1_780_000_000_123_456,
                    "recorded_at_ms": 1_790_000_000_200,
                }
            )
    return records + result_probes(MAX_READ_LONG_BYTES, int_max_attempts=True)
