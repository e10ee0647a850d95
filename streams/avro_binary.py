"""Avro binary primitives for the hot paths that splice record bytes instead of encoding dicts.

The ingest bulk path, the timer's DueEvent prefixes and the executor's results all write a
few fields by hand around bytes that were encoded once, and the record decoders generated
from the schemas (:mod:`streams.avro_source`) read varints with :func:`read_long`; these are
their shared pieces. Each caller proves its layout against the codec (at start-up or in
tests), and ``tests/streams/test_avro_binary.py`` proves these against fastavro.
"""

from __future__ import annotations

MAX_READ_LONG_BYTES = 9
"""The longest varint :func:`read_long` reads: 63 bits, so no 64-bit overflow question."""

_ONE_BYTE = [bytes([i]) for i in range(0x80)]
_CONTINUATION_BITS = [0x8080808080808080 & ((1 << max(8 * size - 8, 0)) - 1) for size in range(9)]


def avro_long(value: int) -> bytes:
    """``value`` as an Avro int or long: zig-zag, then little-endian base-128 varint."""
    zigzag = (value << 1) ^ (value >> 63)
    if 0 <= zigzag < 0x80:
        return _ONE_BYTE[zigzag]
    if 0 < zigzag < 1 << 56:
        size = (zigzag.bit_length() + 6) // 7
        # Spread the 7-bit groups over bytes with three mask-and-shift steps, then set the
        # continuation bits: ~25% cheaper than a loop for epoch milliseconds (6 bytes).
        x = (zigzag & 0x0FFFFFFF) | ((zigzag & 0xFFFFFFF0000000) << 4)
        x = (x & 0x00003FFF00003FFF) | ((x & 0x0FFFC0000FFFC000) << 2)
        x = (x & 0x007F007F007F007F) | ((x & 0x3F803F803F803F80) << 1)
        return (x | _CONTINUATION_BITS[size]).to_bytes(size, "little")
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def avro_bytes(data: bytes) -> bytes:
    """Avro ``bytes`` (or an already UTF-8 encoded ``string``): length, then the data."""
    return avro_long(len(data)) + data


def avro_string(value: str) -> bytes:
    """Avro ``string``: UTF-8 length, then the UTF-8 bytes."""
    return avro_bytes(value.encode())


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """The Avro int or long at ``pos`` and the position after it.

    Reads varints of at most :data:`MAX_READ_LONG_BYTES` bytes, i.e. values in
    [-2**62, 2**62), and raises ``ValueError`` for a longer one: a 10-byte varint may carry
    bits past 64, which the codec drops and Python's integers would keep, so a reader that
    promises the codec's values leaves such a record to the codec. Raises ``IndexError``
    when ``data`` ends inside the varint.
    """
    byte = data[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    value = byte & 0x7F
    shift = 7
    end = pos + MAX_READ_LONG_BYTES
    pos += 1
    while pos < end:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
    raise ValueError(f"varint longer than {MAX_READ_LONG_BYTES} bytes")
