"""A Job record reader 2-4x cheaper than the generic codec, for hot loops that decode Jobs.

The timer decodes every create it takes in, the status view every job it stores; fastavro's
generic reader costs ~14 us for a Job (27 fields, unions, a nested record, a map).
:class:`JobReader` serves the decoder :func:`~streams.avro_reader.generate_reader` derives
from the Job schema, keeping the fields the jobs of one bulk load or one cron schedule share
by their bytes: ``status`` to ``payload`` and ``cron`` to ``request_hash`` (such jobs differ
in id, version and run time), and the two stamps (a load stamps its jobs with its
millisecond). The bounds (``schemas/bounds.json``) of the shared fields are checked when
their bytes are first parsed, the others' per record.

It is exact or unused: it serves only records whose fingerprint is the codec's writer
schema for Job when that schema is also the reader schema (no resolution), and only after
proving, at construction, that it decodes probe records exactly as the codec does (derived
from the schema: :mod:`streams.probe_records`). Any
other record, and any record the decoder cannot be sure of (a varint longer than 9 bytes:
see :mod:`streams.avro_source`), goes to :meth:`Codec.decode` (which raises the usual
:class:`DecodeError` for garbage).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streams.avro_reader import GeneratedReader, Memo, generate_reader
from streams.codec import HEADER_LEN, SINGLE_OBJECT_MAGIC, Codec, RecordKind
from streams.exceptions import InvalidRecordError
from streams.fast_path import FastPath, proven_decoder

_SHARED_RUNS = (("status", "payload"), ("cron", "request_hash"))
_STAMPS = ("created_at_ms", "updated_at_ms")
# The fields of the rule "exactly one schedule kind", checked per record: it spans runs.
_SCHEDULE_KINDS = ("run_at_ms", "cron", "depends_on")


class JobReader:
    """Decodes Job records like ``codec.decode(RecordKind.JOB, data)``, faster (see module)."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        kind = RecordKind.JOB
        name = codec.record_name(kind)
        names = [str(f["name"]) for f in codec.writer_schema(kind)["fields"]]
        memos = [Memo(*_STAMPS, max_entries=1)]
        shared: list[str] = []
        for first, last in _SHARED_RUNS:
            run = names[names.index(first) : names.index(last) + 1]
            memos.append(Memo(first, last, check=codec.bounds.checker(name, fields=run)))
            shared += run
        per_record = [n for n in names if n not in shared or n in _SCHEDULE_KINDS]
        self._check_record = codec.bounds.checker(name, fields=per_record)
        self._decoder, why_off = proven_decoder(
            codec,
            kind,
            lambda schema: generate_reader(schema, memos=memos, start=HEADER_LEN),
            lambda data: _outcome(codec.decode, kind, data),
            self._checked_read,
        )
        self.enabled = self._decoder is not None
        self.fast_path = FastPath(
            "the fast Job reader (streams/job_reader.py)", self.enabled, why_off
        )
        header = SINGLE_OBJECT_MAGIC + codec.writer_fingerprint(kind)
        self._served_header = header if self.enabled else None
        self._read = self._decoder.read if self._decoder is not None else _unserved

    def decode(self, data: bytes) -> dict[str, Any]:
        """The Job in ``data``; raises :class:`DecodeError` when it is not one, and its
        subclass :class:`InvalidRecordError` when it breaks a bound (``schemas/bounds.json``)."""
        if data[:HEADER_LEN] == self._served_header:
            try:
                record = self._read(data)
            except (IndexError, ValueError):
                pass  # the codec names what is wrong with it
            else:
                reason = self._check_record(record)
                if reason is not None:
                    raise InvalidRecordError(reason)
                return record
        self.fast_path.fell_back()
        return self._codec.decode(RecordKind.JOB, data)

    def _checked(self, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` if it keeps the per-record bounds (what :meth:`decode` does inline)."""
        reason = self._check_record(record)
        if reason is not None:
            raise InvalidRecordError(reason)
        return record

    def _checked_read(self, decoder: GeneratedReader) -> Callable[[bytes], Any]:
        """What :meth:`decode` makes of data ``decoder`` reads: the record, or the reason a
        bound refuses it (as :func:`_outcome` gives the codec's)."""
        return lambda data: _outcome(lambda d: self._checked(decoder.read(d)), data)


def _unserved(data: bytes) -> dict[str, Any]:
    """The decoder of a reader that is off (never called: it serves no header)."""
    raise ValueError("the fast Job reader is off")


def _outcome(decode: Any, *args: Any) -> Any:
    """The record decoded, or the reason a bound refuses it."""
    try:
        return decode(*args)
    except InvalidRecordError as exc:
        return str(exc)
