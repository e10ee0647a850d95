"""What a fast record path says when the reference codec (fastavro) serves instead of it.

Every fast reader and writer of kafkron is "exact or unused": it proves itself against the
codec at start-up and hands the codec any record it cannot be sure of. :class:`FastPath`
makes both visible: a path switched off at start-up logs one WARNING naming the path and why
(every record then costs the generic codec), and the records a working path hands to the
codec are counted, the first one logged at INFO (records with an attempt history, 10-byte
varints and garbage go there on purpose). :func:`reads_as_the_codec` is the start-up proof
the fast readers share, on the probe records :mod:`streams.probe_records` derives from the
schema; :func:`proven_decoder` runs it on a decoder generated from a kind's writer schema.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from streams.avro_binary import MAX_READ_LONG_BYTES
from streams.avro_reader import GeneratedReader
from streams.codec import Codec, RecordKind
from streams.exceptions import DecodeError, UnsupportedSchemaError
from streams.probe_records import probe_records

log = logging.getLogger(__name__)


class FastPath:
    """The state of one fast path: on or off, and how many records it left to the codec."""

    __slots__ = ("enabled", "fallbacks", "name")

    def __init__(self, name: str, enabled: bool, why_off: str = "") -> None:
        self.name = name
        self.enabled = enabled
        self.fallbacks = 0
        if not enabled:
            log.warning(
                "%s is off: %s; every record goes through the generic codec (slower, same result)",
                name,
                why_off or "it did not read its probe records exactly as the codec does",
            )

    def fell_back(self) -> None:
        """Count one record left to the codec (the first is logged)."""
        self.fallbacks += 1
        if self.fallbacks == 1 and self.enabled:
            log.info("%s left its first record to the generic codec", self.name)


def reads_as_the_codec(
    probes: Iterable[Mapping[str, Any]],
    encode: Callable[[Mapping[str, Any]], bytes],
    expected: Callable[[bytes], Any],
    read: Callable[[bytes], Any],
) -> bool:
    """The start-up proof of a fast reader: does ``read`` give, for the bytes of every probe
    (``encode``: the codec's), what ``expected`` gives (the codec's decoding, in the reader's
    form)? Each probe is read twice a round (fresh, then from what a memo kept) in two rounds
    (then from the runs kept of other probes). Reading raising ``IndexError``, ``ValueError``,
    ``KeyError`` or ``DecodeError`` is a no; the caller clears the reader's memos after."""
    records = list(probes)
    try:
        for _ in range(2):
            for probe in records:
                data = encode(probe)
                want = expected(data)
                for _ in range(2):
                    if read(data) != want:
                        return False
    except (DecodeError, IndexError, ValueError, KeyError):
        return False
    return True


def proven_decoder(
    codec: Codec,
    kind: RecordKind,
    generate: Callable[[Mapping[str, Any]], GeneratedReader],
    expected: Callable[[bytes], Any],
    read_of: Callable[[GeneratedReader], Callable[[bytes], Any]],
) -> tuple[GeneratedReader | None, str]:
    """The decoder ``generate`` makes of the writer schema of ``kind``, if those records need
    no resolution and ``read_of(decoder)`` reads every probe record as ``expected`` (the
    codec's decoding, in the reader's form: :func:`reads_as_the_codec`); else None and why
    (empty when it read a probe otherwise). Its memos are cleared after the proof."""
    name = codec.record_name(kind).rpartition(".")[2]
    if codec.writer_version(kind) != codec.reader_version(kind):
        return None, f"{name} records of this writer schema need resolution to the reader's"
    schema = codec.writer_schema(kind)
    try:
        decoder = generate(schema)
    except UnsupportedSchemaError as exc:
        return None, f"the {name} schema has what it cannot read ({exc})"
    probes = probe_records(schema, codec.bounds, max_varint_bytes=MAX_READ_LONG_BYTES)
    try:
        agrees = reads_as_the_codec(
            probes, lambda record: codec.encode(kind, record), expected, read_of(decoder)
        )
    finally:
        decoder.clear()
    return (decoder, "") if agrees else (None, "")
