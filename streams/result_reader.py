"""An ExecutionResult reader ~5x cheaper than the generic codec, for the timer's hot loop.

The timer applies two results per execution (STARTED, SUCCEEDED) and needs three of their
fourteen fields: ``job_id``, ``scheduled_for_ms`` and ``status``. fastavro's generic reader
costs ~12 us a record here; :class:`ResultReader` serves the decoder
:func:`~streams.avro_reader.generate_reader` derives from the ExecutionResult schema for
those three fields: it checks every field as the codec would (lengths, UTF-8, union
branches, enum ranges, nothing left over) but builds only those three values. The fields
from ``scheduled_for_ms`` to ``worker_id`` are kept by their bytes (an executor's results
of one tick and status share them): most records then cost two id decodes, a comparison of
those bytes and one regular expression over the times after them.

It is exact or unused: it serves only records whose fingerprint is the codec's writer
schema for ExecutionResult when that schema is also the reader schema (no resolution), and
only after proving, at construction, that probe records covering every status, trigger and
union branch (derived from the schema: :mod:`streams.probe_records`) read exactly as the
codec decodes them. It accepts a record only when it is
sure the codec would accept it with the same values; anything else (a varint longer than
9 bytes, any record it cannot parse) goes to :meth:`Codec.decode`, which returns the record
or raises the usual :class:`DecodeError`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from streams.avro_reader import Memo, generate_reader
from streams.codec import HEADER_LEN, SINGLE_OBJECT_MAGIC, Codec, RecordKind
from streams.exceptions import InvalidRecordError
from streams.fast_path import FastPath, proven_decoder

# What an executor's results of one tick and status share: ~12 bytes and its worker id. An
# execution's STARTED and SUCCEEDED alternate: looked up at once, not compared with the last.
_SHARED_RUN = Memo("scheduled_for_ms", "worker_id", max_key_bytes=128, try_last=False)


class ResultFields(NamedTuple):
    """The fields of an ExecutionResult that the timer acts on."""

    job_id: str
    scheduled_for_ms: int
    status: str


def fields_of(record: dict[str, Any]) -> ResultFields:
    """The :class:`ResultFields` of a decoded ExecutionResult dict."""
    return ResultFields(record["job_id"], record["scheduled_for_ms"], record["status"])


class ResultReader:
    """Reads :class:`ResultFields` of ExecutionResult records exactly as the codec decodes them."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        kind = RecordKind.EXECUTION_RESULT
        self._decoder, why_off = proven_decoder(
            codec,
            kind,
            lambda schema: generate_reader(
                schema,
                fields=ResultFields._fields,
                memos=[_SHARED_RUN],
                start=HEADER_LEN,
                as_tuple=ResultFields,
            ),
            lambda data: fields_of(codec.decode(kind, data, check=False)),
            lambda decoder: decoder.read,
        )
        self.enabled = self._decoder is not None
        self.fast_path = FastPath(
            "the fast ExecutionResult reader (streams/result_reader.py)", self.enabled, why_off
        )
        header = SINGLE_OBJECT_MAGIC + codec.writer_fingerprint(RecordKind.EXECUTION_RESULT)
        self._served_header = header if self.enabled else None
        self._read = self._decoder.read if self._decoder is not None else _unserved
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
        fields: ResultFields | None = None
        if data[:HEADER_LEN] == self._served_header:
            try:
                fields = self._read(data)
            except (IndexError, ValueError):
                fields = None  # the codec names what is wrong with it
        if fields is None:
            self.fast_path.fell_back()
            fields = fields_of(self._codec.decode(RecordKind.EXECUTION_RESULT, data, check=False))
        reason = self._check(fields)
        if reason is not None:
            raise InvalidRecordError(reason)
        return fields


def _unserved(data: bytes) -> ResultFields:
    """The decoder of a reader that is off (never called: it serves no header)."""
    raise ValueError("the fast ExecutionResult reader is off")
