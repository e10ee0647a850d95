"""One kind's records as Python objects, in the codec's single-object encoding, fast.

:class:`RecordBytes` writes and reads the records of one kind as the codec does (``C3 01``,
the writer schema's fingerprint, the Avro body) with code generated from the codec's writer
schema (``streams/avro_writer.py``, ``streams/avro_reader.py``). Objects carry one attribute
per field (nested records as tuples) and are built by ``make(*values)``, the values in
schema order: a dataclass declaring the fields in that order (it may add others, with
defaults). The fields after ``memo_after`` are kept by their bytes when decoded (a
``Memo`` of ``avro_reader.py``: records that share them, a herd's, read them once), and so
are longs (the decoder's ``memo_longs``: a herd's states share their times).

Exact or unused: at construction it writes and reads probe records derived from the schema
(:mod:`streams.probe_records`) both ways, through ``make``, and turns itself off
(``streams/fast_path.py`` says so) when the generated code and the codec disagree. Bytes of
another fingerprint (a record written under an older schema), and bytes the generated decoder
is not sure of, go to the codec, counted, which resolves versions and names any problem in
its ``DecodeError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from streams.avro_binary import MAX_READ_LONG_BYTES
from streams.avro_reader import GeneratedReader, Memo, generate_reader
from streams.avro_writer import GeneratedWriter, generate_writer
from streams.codec import HEADER_LEN, SINGLE_OBJECT_MAGIC, Codec, RecordKind
from streams.exceptions import ConfigurationError, UnsupportedSchemaError
from streams.fast_path import FastPath
from streams.probe_records import probe_records

T = TypeVar("T")


class RecordBytes(Generic[T]):
    """Encodes and decodes the records of ``kind`` as ``codec`` does, through generated code."""

    def __init__(
        self,
        codec: Codec,
        kind: RecordKind,
        make: Callable[..., T],
        *,
        memo_after: str | None = None,
    ) -> None:
        if codec.reader_version(kind) != codec.writer_version(kind):
            raise ConfigurationError(
                f"{kind.value} is read as v{codec.reader_version(kind)} but written as "
                f"v{codec.writer_version(kind)}; pin both to one version"
            )
        self.codec, self.kind, self.make = codec, kind, make
        self.schema = codec.writer_schema(kind)
        self.header = SINGLE_OBJECT_MAGIC + codec.writer_fingerprint(kind)
        self.names = tuple(str(f["name"]) for f in self.schema["fields"])
        if memo_after is not None and memo_after not in self.names:
            raise ConfigurationError(f"{kind.value} has no field {memo_after}")
        memo_from = len(self.names) if memo_after is None else self.names.index(memo_after) + 1
        memos = [Memo(self.names[memo_from], self.names[-1])] if memo_from < len(self.names) else []
        self.reader, self.writer = self._generated(
            lambda: generate_reader(
                self.schema,
                start=HEADER_LEN,
                make=make,
                memos=memos,
                tuple_records=True,
                memo_longs=True,
            ),
            lambda: generate_writer(self.schema, tuple_records=True, prefix=self.header),
        )
        self.fast = self._agrees_with_the_codec()
        self.fast_path = FastPath(
            f"the generated {kind.value} code (services/timer/record_bytes.py)",
            self.fast,
            "it did not write and read its probe records exactly as the codec does",
        )

    def fields(self, first: int) -> tuple[GeneratedReader, GeneratedWriter]:
        """The generated decoder and encoder of the writer schema's fields from ``first`` on,
        as a record of their own (a dict of them): for the bytes of those fields, and only
        while :attr:`fast`."""
        run = {**self.schema, "fields": self.schema["fields"][first:]}
        return self._generated(
            lambda: generate_reader(run, tuple_records=True, memo_longs=True),
            lambda: generate_writer(run, attribute=False, tuple_records=True),
        )

    def _generated(
        self, reader: Callable[[], GeneratedReader], writer: Callable[[], GeneratedWriter]
    ) -> tuple[GeneratedReader, GeneratedWriter]:
        """The generated decoder and encoder; a schema they have no code for is refused."""
        try:
            return reader(), writer()
        except UnsupportedSchemaError as exc:
            raise ConfigurationError(
                f"schemas/{self.kind.value}.v{self.codec.writer_version(self.kind)}.avsc "
                f"has a {exc} that streams/avro_writer.py or avro_reader.py writes no code "
                "for: extend it there"
            ) from exc

    def encode(self, record: T) -> bytes:
        """``record`` (an attribute per field) as the codec would encode it."""
        if self.fast:
            return self.writer.encode(record)
        return self.codec.encode(self.kind, self.writer.to_record(record))

    def decode(self, data: bytes) -> T:
        """The record in ``data``, built by ``make``; raises ``DecodeError`` like the codec."""
        if self.fast and data.startswith(self.header):
            try:
                record: T = self.reader.read(data)
                return record
            except (IndexError, ValueError):
                pass  # the codec names the problem, or reads what this code is unsure of
        self.fast_path.fell_back()
        result: T = self.reader.from_record(self.codec.decode(self.kind, data))
        return result

    def _agrees_with_the_codec(self) -> bool:
        probes = probe_records(self.schema, self.codec.bounds, max_varint_bytes=MAX_READ_LONG_BYTES)
        for record in probes:
            expected = self.codec.encode(self.kind, record)
            try:
                probe = self.reader.from_record(record)
                written = self.writer.encode(probe)
                reads = [self.reader.read(expected) for _ in range(2)]  # parsed, then kept
                if any(self.writer.to_record(read) != record for read in [*reads, probe]):
                    return False
            except (IndexError, ValueError, TypeError, KeyError, AttributeError):
                return False
            if written != expected:
                return False
        self.reader.clear()  # the probes' runs are no herd's
        return True
