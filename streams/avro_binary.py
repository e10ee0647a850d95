"""Avro binary primitives for the hot paths that splice record bytes instead of encoding dicts.

The ingest bulk path, the timer's DueEvent prefixes and the executor's results all write a
few fields by hand around bytes that were encoded once; these are their shared pieces. Each
caller proves its layout against the codec's own encoder (at start-up or in tests), and
``tests/streams/test_avro_binary.py`` proves these against fastavro.
"""

from __future__ import annotations

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
