"""Encoders of one Avro record, generated from its schema and compiled once.

fastavro's generic writer spends most of a small record's time walking the schema (~9 us
for the timer's per-job state); :func:`generate_writer` writes the Python source of an
encoder for one record schema (as fastavro parses it) on the pieces of
:mod:`streams.avro_source`, which :mod:`streams.avro_reader` decodes with, and compiles it
with ``exec``. Nothing is written by hand per record: the ``.avsc`` stays the one source.

An encoder writes exactly the bytes fastavro writes for the same values. It reads the
top-level fields as attributes of an object, or (``attribute`` False) items of a dict; a
nested record is a dict, or (``tuple_records``) a tuple of its fields' values in schema
order, as :func:`~streams.avro_reader.generate_reader` returns them. Supported types: null,
boolean, long, string, bytes, enum, array, record, and unions of null and one type; any
other raises :class:`UnsupportedSchemaError`. Longs of more than one byte (epoch
milliseconds: 6 bytes, ~0.5 us to write in Python) come from bounded memos, value -> bytes
(per union branch, with its index): records that share their times write each once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from streams.avro_binary import avro_long
from streams.avro_source import MEMO_ENTRIES, SchemaSource
from streams.exceptions import UnsupportedSchemaError

__all__ = ["GeneratedWriter", "generate_writer"]

_ONE_BYTE_LONGS = tuple(avro_long(i) for i in range(64))


@dataclass(frozen=True, slots=True)
class GeneratedWriter:
    """A compiled encoder: ``encode(value)`` is the prefix and the Avro binary of ``value``;
    ``to_record(value)`` is ``value`` as the codec encodes it (a dict, nested records too)."""

    encode: Callable[[Any], bytes]
    to_record: Callable[[Any], dict[str, Any]]
    source: str


def generate_writer(
    schema: Mapping[str, Any],
    *,
    attribute: bool = True,
    tuple_records: bool = False,
    prefix: bytes = b"",
) -> GeneratedWriter:
    """The encoder of records of ``schema`` (a record schema as fastavro parses it), its
    output starting with ``prefix`` (e.g. the single-object header).

    Raises :class:`UnsupportedSchemaError` for a schema it writes no code for.
    """
    source = _WriteSource(schema.get("__named_schemas", {}), tuple_records=tuple_records)
    fields = list(schema["fields"])
    with source.inside(schema):
        values = [_access("o", str(f["name"]), attribute) for f in fields]
        source.emit("", "def encode(o):")
        source.emit("    ", *(f"v{i} = {value}" for i, value in enumerate(values)))
        parts = [repr(prefix)] if prefix else []
        parts += [source.write(f["type"], f"v{i}") for i, f in enumerate(fields)]
        source.emit("    ", f"return b''.join(({''.join(f'{part}, ' for part in parts)}))")
        items = ", ".join(
            f"{f['name']!r}: {source.convert(f['type'], value, True)}"
            for f, value in zip(fields, values, strict=True)
        )
        source.emit("", "def to_record(o):", f"    return {{{items}}}")
    text = source.text()
    source.env.update(_text=_text, _blob=_blob)
    try:
        code = compile(text, f"<writer of {schema['name']}>", "exec")
    except (SyntaxError, RecursionError) as exc:  # nested too deep for Python's compiler
        raise UnsupportedSchemaError(f"{schema['name']}: {exc}") from exc
    exec(code, source.env)
    return GeneratedWriter(source.env["encode"], source.env["to_record"], text)


class _WriteSource(SchemaSource):
    """Writes expressions of the Avro binary of values, and the helpers they call."""

    def write(self, avro_type: Any, value: str) -> str:
        """An expression of the Avro binary of ``value`` (a name or an index: cheap to repeat)."""
        kind = self.kind_of(avro_type)
        avro_type = self.resolve(avro_type)
        if kind == "union":
            if len(avro_type) != 2 or "null" not in avro_type:
                raise UnsupportedSchemaError(f"union {avro_type!r} (only null and one type)")
            null_at = avro_type.index("null")
            other = avro_type[1 - null_at]
            null_byte, other_byte = avro_long(null_at), avro_long(1 - null_at)
            if self.kind_of(other) == "long":  # the branch index memoized with the value
                other_bytes = self.memo_long(other_byte, value)
            else:
                other_bytes = f"{other_byte!r} + {self.write(other, value)}"
            return f"({null_byte!r} if {value} is None else {other_bytes})"
        if kind == "null":
            return "b''"
        if kind == "boolean":
            return f"(b'\\x01' if {value} else b'\\x00')"
        if kind == "long":
            return self.memo_long(b"", value)
        if kind == "string":
            return f"_text({value})"
        if kind == "bytes":
            return f"_blob({value})"
        if kind == "enum":
            symbols = {s: avro_long(i) for i, s in enumerate(avro_type["symbols"])}
            return f"{self.constant('enum', symbols)}[{value}]"
        if kind == "record":
            with self.inside(avro_type):
                parts = [
                    self.write(f["type"], self.field_of(value, i, str(f["name"])))
                    for i, f in enumerate(avro_type["fields"])
                ]
            return "(" + " + ".join(parts or ["b''"]) + ")"
        if kind == "array":
            return self.write_array(avro_type["items"], value)
        raise UnsupportedSchemaError(f"type {kind!r}")

    def field_of(self, record: str, index: int, name: str) -> str:
        """An expression of a nested record's field."""
        return f"{record}[{index if self.tuple_records else repr(name)}]"

    def write_array(self, items: Any, value: str) -> str:
        """One block of all the items (none: the end byte alone), by a helper."""
        helper, item = self.local("_write_array"), self.local("x")
        count = self.memo_long(b"", "len(v)")
        self.helpers.append(
            f"def {helper}(v):\n"
            f"    return b''.join([{count}, *[{self.write(items, item)}"
            f" for {item} in v], b'\\x00'])\n"
        )
        return f"({helper}({value}) if {value} else b'\\x00')"

    def memo_long(self, prefix: bytes, value: str) -> str:
        """An expression of ``prefix`` and the long ``value``, from a memo once written."""
        memo: dict[int, bytes] = {}
        name = self.constant("longs", memo)
        write = self.constant("write_long", _long_writer(memo, prefix))
        return f"({name}.get({value}) or {write}({value}))"


def _long_writer(memo: dict[int, bytes], prefix: bytes) -> Callable[[int], bytes]:
    """What writes ``prefix`` + :func:`avro_long` of a value into ``memo`` (the generated
    code looks the value up first: no call when it is there)."""

    def write_long(value: int) -> bytes:
        if len(memo) >= MEMO_ENTRIES:
            memo.clear()
        data = memo[value] = prefix + avro_long(value)
        return data

    return write_long


def _text(value: str) -> bytes:
    """Avro ``string``: its UTF-8 length, then its UTF-8 bytes."""
    data = value.encode()
    size = len(data)
    return (_ONE_BYTE_LONGS[size] if size < 64 else avro_long(size)) + data


def _blob(data: bytes) -> bytes:
    """Avro ``bytes``: the length, then the bytes."""
    size = len(data)
    return (_ONE_BYTE_LONGS[size] if size < 64 else avro_long(size)) + data


def _access(var: str, name: str, attribute: bool) -> str:
    return f"{var}.{name}" if attribute else f"{var}[{name!r}]"
