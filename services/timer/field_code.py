"""An Avro record's encoder and decoder, generated as Python source from its schema.

fastavro's generic writer and reader spend most of a small record's time walking the schema
(~9 us to encode the timer's per-job state, ~4 us to decode it); code generated once per
schema, like the bounds checks of ``streams/bounds.py``, does only the record's own work.
The schema stays the one source: nothing here knows a field by name.

Longs of more than two bytes (epoch milliseconds: 6 bytes, ~0.5 us to write and ~0.8 us
to read in Python) go through bounded memos of the generated code: value -> bytes (per
union branch, with its index), and the (up to) 9 bytes at a long's position -> (value,
length). The bytes of a varint up to its last byte decide both, so equal windows read
equally; a herd's states share their times. A decoder may also keep the values of a
record's last fields by their bytes (``memo_from``): a herd's states share those whole.

Values: a top-level record is an object with an attribute per field, or a dict with an item
per field (``attribute``), built by ``make(**fields)`` or (``positional``) ``make(*values)``
in schema order; a nested record is a tuple of its fields' values in schema order;
an array is a list; a union of null and one type is None or that type's value. Supported
types: null, boolean, long, string, bytes, enum, array, record and such unions; any other
raises :class:`UnsupportedSchemaError`. Code may serve a run of a record's fields
(``first``, ``stop``), e.g. to re-encode the fields after a prefix that did not change.

Exact or unused: a decoder raises ``ValueError`` or ``IndexError`` for anything it is not
sure of (a varint over 9 bytes, a boolean byte other than 0 or 1, an unknown union branch,
a length past the end, invalid UTF-8), for the caller to hand the bytes to the codec;
``tests/services/timer/test_field_code.py`` proves encoder and decoder against fastavro.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from streams.avro_binary import MAX_READ_LONG_BYTES, avro_long, read_long

_PRIMITIVES = ("null", "boolean", "long", "string", "bytes")
_MEMO_ENTRIES = 4096
"""Bounds each memo of longs; a full memo starts over."""
_ONE_BYTE_LONGS = tuple(avro_long(i) for i in range(64))
_ZIGZAG = tuple((b >> 1) ^ -(b & 1) for b in range(128))


class UnsupportedSchemaError(ValueError):
    """The schema uses a type this generator does not write code for."""


@dataclass(frozen=True, slots=True)
class FieldCode:
    """Generated code for the fields ``names`` of one record (a run of its fields)."""

    names: tuple[str, ...]
    # The fields' values (read from a record object or dict) as Avro binary, in schema order.
    encode: Callable[[Any], bytes]
    # (make(...) of the fields, position after them) for the fields at a position of bytes.
    decode: Callable[[bytes, int, Callable[..., Any]], tuple[Any, int]]
    # The fields of a record as the codec reads and writes them (nested records as dicts)
    # from their values in this module's form, and back (``make(...)``, as ``decode``).
    to_record: Callable[[Any], dict[str, Any]]
    from_record: Callable[[Mapping[str, Any], Callable[..., Any]], Any]


def field_code(
    schema: Mapping[str, Any],
    first: int = 0,
    stop: int | None = None,
    *,
    attribute: bool = True,
    positional: bool = False,
    memo_from: int | None = None,
) -> FieldCode:
    """The code of fields ``first`` to ``stop`` (exclusive) of the record ``schema`` (as
    fastavro parses it), reading values as attributes or (not ``attribute``) items, and
    building records with ``make(*values)`` (``positional``) or ``make(**fields)``.

    ``memo_from`` (an index in the record's fields; the code's fields must run to its end)
    makes the decoder keep the values of the fields from there on by their bytes, which run
    to the end of the data: bytes equal to bytes that once parsed to the end read as the
    same values (fresh lists each time). For fields that records of one kind often share.
    """
    named: Mapping[str, Any] = schema.get("__named_schemas", {})
    all_fields = list(schema["fields"])
    fields = all_fields[first:stop]
    if memo_from is not None and (stop is not None and stop < len(all_fields)):
        raise ValueError("a memo keeps the fields to the end of the record")
    source = _Source(named)
    kept_from = None if memo_from is None else max(memo_from - first, 0)
    try:
        encode = source.encoder(fields, attribute)
        decode = source.decoder(fields, positional, kept_from)
        to_record = source.to_record(fields, attribute)
        from_record = source.from_record(fields, positional)
    except RecursionError:
        raise UnsupportedSchemaError(f"{schema['name']} contains itself") from None
    env: dict[str, Any] = {
        "_text": _text,
        "_blob": _blob,
        "_zz": _ZIGZAG,
        **_read_long_memo(),
        **source.env,
    }
    text = "\n".join([*source.helpers, encode, decode, to_record, from_record])
    exec(compile(text, f"<field code of {schema['name']}>", "exec"), env)
    names = tuple(f["name"] for f in fields)
    return FieldCode(names, env["encode"], env["decode"], env["to_record"], env["from_record"])


class _Source:
    """Writes the source of one :class:`FieldCode`: its functions and their helpers."""

    def __init__(self, named: Mapping[str, Any]) -> None:
        self.named = named
        self.env: dict[str, Any] = {}
        self.helpers: list[str] = []
        self._count = 0

    def name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def resolve(self, avro_type: Any) -> Any:
        """``avro_type`` with a named reference replaced by its definition."""
        if isinstance(avro_type, str) and avro_type not in _PRIMITIVES:
            if avro_type not in self.named:
                raise UnsupportedSchemaError(f"type {avro_type!r}")
            return self.named[avro_type]
        if isinstance(avro_type, dict) and ("logicalType" in avro_type):
            raise UnsupportedSchemaError(f"logical type {avro_type['logicalType']!r}")
        return avro_type

    def union(self, branches: list[Any]) -> tuple[int, int, Any]:
        """(index of null, index of the other branch, that branch's type)."""
        if len(branches) != 2 or "null" not in branches:
            raise UnsupportedSchemaError(f"union {branches!r} (only null and one type)")
        null_at = branches.index("null")
        return null_at, 1 - null_at, branches[1 - null_at]

    # --- encoding: one expression per value ----------------------------------------------

    def encoder(self, fields: list[Mapping[str, Any]], attribute: bool) -> str:
        lines = ["def encode(o):"]
        parts = []
        for i, field in enumerate(fields):
            lines.append(f"    v{i} = {_access('o', field['name'], attribute)}")
            parts.append(self.write(field["type"], f"v{i}"))
        lines.append(f"    return b''.join(({''.join(f'{part}, ' for part in parts)}))")
        return "\n".join(lines) + "\n"

    def write(self, avro_type: Any, value: str) -> str:
        """An expression of the Avro binary of ``value`` (a name or an index: cheap to repeat)."""
        avro_type = self.resolve(avro_type)
        if isinstance(avro_type, list):
            null_at, other_at, other = self.union(avro_type)
            null_byte, other_byte = avro_long(null_at), avro_long(other_at)
            if self.resolve(other) == "long":  # the branch index memoized with the value
                other_bytes = self.memo_long(other_byte, value)
            else:
                other_bytes = f"{other_byte!r} + {self.write(other, value)}"
            return f"({null_byte!r} if {value} is None else {other_bytes})"
        kind = avro_type if isinstance(avro_type, str) else avro_type["type"]
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
            table = self.name("_enum")
            self.env[table] = {s: avro_long(i) for i, s in enumerate(avro_type["symbols"])}
            return f"{table}[{value}]"
        if kind == "record":
            parts = [
                self.write(f["type"], f"{value}[{i}]") for i, f in enumerate(avro_type["fields"])
            ]
            return "(" + " + ".join(parts or ["b''"]) + ")"
        if kind == "array":
            helper, item = self.name("_write_array"), self.name("x")
            count = self.memo_long(b"", "len(v)")
            self.helpers.append(
                f"def {helper}(v):\n"
                f"    return b''.join([{count}, *[{self.write(avro_type['items'], item)}"
                f" for {item} in v], b'\\x00'])\n"
            )
            return f"({helper}({value}) if {value} else b'\\x00')"
        raise UnsupportedSchemaError(f"type {kind!r}")

    def memo_long(self, prefix: bytes, value: str) -> str:
        """An expression of ``prefix`` and the long ``value``, from a memo once written."""
        memo, write = self.name("_longs"), self.name("_write_long")
        self.env[memo], self.env[write] = _long_memo(prefix)
        return f"({memo}.get({value}) or {write}({value}))"

    # --- decoding: statements that read one value at ``pos`` -----------------------------

    def decoder(self, fields: list[Mapping[str, Any]], positional: bool, kept: int | None) -> str:
        lines = ["def decode(data, pos, make):", "    size = len(data)"]
        if kept is not None and kept >= len(fields):
            kept = None  # no field to keep
        for i, field in enumerate(fields if kept is None else fields[:kept]):
            self.read(field["type"], f"v{i}", lines, "    ")
        if kept is not None:
            self.kept_fields(fields, kept, lines)
        args = [f"v{i}" if positional else f"{f['name']}=v{i}" for i, f in enumerate(fields)]
        lines.append(f"    return make({', '.join(args)}), pos")
        return "\n".join(lines) + "\n"

    def kept_fields(self, fields: list[Mapping[str, Any]], kept: int, lines: list[str]) -> None:
        """The fields from ``kept`` on: their values by the rest of the bytes, else read (and
        kept when they end the bytes), lists stored as tuples and handed out as new lists."""
        self.env["_kept"] = {}
        indices = range(kept, len(fields))
        names = "".join(f"v{i}, " for i in indices)
        lines += ["    rest = data[pos:]", "    e = _kept.get(rest)", "    if e is None:"]
        for i in indices:
            self.read(fields[i]["type"], f"v{i}", lines, "        ")
        frozen = "".join(f"{self.frozen(fields[i]['type'], f'v{i}') or f'v{i}'}, " for i in indices)
        lines += [
            "        if pos == size:",
            f"            if len(_kept) >= {_MEMO_ENTRIES}:",
            "                _kept.clear()",
            f"            _kept[rest] = ({frozen})",
            "    else:",
            f"        {names}= e",
            "        pos = size",
        ]
        for i in indices:
            thawed = self.thawed(fields[i]["type"], f"v{i}")
            if thawed is not None:
                lines.append(f"        v{i} = {thawed}")

    def frozen(self, avro_type: Any, value: str) -> str | None:
        """An expression of ``value`` with its lists as tuples; None when it holds no list."""
        return self.mapped(avro_type, value, "tuple")

    def thawed(self, avro_type: Any, value: str) -> str | None:
        """An expression of a frozen ``value`` with new lists for its tuples of arrays."""
        return self.mapped(avro_type, value, "list")

    def mapped(self, avro_type: Any, value: str, sequence: str) -> str | None:
        avro_type = self.resolve(avro_type)
        if isinstance(avro_type, list):
            inner = self.mapped(self.union(avro_type)[2], value, sequence)
            return None if inner is None else f"(None if {value} is None else {inner})"
        kind = avro_type if isinstance(avro_type, str) else avro_type["type"]
        if kind == "array":
            item = self.name("x")
            inner = self.mapped(avro_type["items"], item, sequence)
            if inner is None:
                return f"{sequence}({value})"
            return f"{sequence}([{inner} for {item} in {value}])"
        if kind == "record":
            fields = avro_type["fields"]
            parts = [
                self.mapped(f["type"], f"{value}[{i}]", sequence) for i, f in enumerate(fields)
            ]
            if all(part is None for part in parts):
                return None
            items = "".join(f"{part or f'{value}[{i}]'}, " for i, part in enumerate(parts))
            return f"({items})"
        return None

    def read(self, avro_type: Any, target: str, lines: list[str], indent: str) -> None:
        """Append the lines reading one value into ``target`` to ``lines``."""
        avro_type = self.resolve(avro_type)
        if isinstance(avro_type, list):
            null_at, other_at, other = self.union(avro_type)
            lines.append(f"{indent}b = data[pos]")
            lines.append(f"{indent}pos += 1")
            lines.append(f"{indent}if b == {2 * null_at}:")
            lines.append(f"{indent}    {target} = None")
            lines.append(f"{indent}elif b == {2 * other_at}:")
            self.read(other, target, lines, indent + "    ")
            lines.append(f"{indent}else:")
            lines.append(f"{indent}    raise ValueError('unknown union branch')")
            return
        kind = avro_type if isinstance(avro_type, str) else avro_type["type"]
        if kind == "null":
            lines.append(f"{indent}{target} = None")
        elif kind == "boolean":
            lines.append(f"{indent}b = data[pos]")
            lines.append(f"{indent}if b > 1:")
            lines.append(f"{indent}    raise ValueError('boolean byte not 0 or 1')")
            lines.append(f"{indent}pos += 1")
            lines.append(f"{indent}{target} = b == 1")
        elif kind == "long":
            self.read_long(target, lines, indent)
        elif kind in ("string", "bytes"):
            self.read_long("n", lines, indent)
            lines.append(f"{indent}end = pos + n")
            lines.append(f"{indent}if n < 0 or end > size:")
            lines.append(f"{indent}    raise ValueError('length past the end')")
            text = ".decode()" if kind == "string" else ""
            lines.append(f"{indent}{target} = data[pos:end]{text}")
            lines.append(f"{indent}pos = end")
        elif kind == "enum":
            table = self.name("_symbols")
            self.env[table] = tuple(avro_type["symbols"])
            self.read_long("n", lines, indent)
            lines.append(f"{indent}if not 0 <= n < {len(avro_type['symbols'])}:")
            lines.append(f"{indent}    raise ValueError('unknown enum symbol')")
            lines.append(f"{indent}{target} = {table}[n]")
        elif kind == "record":
            parts = [self.name("r") for _ in avro_type["fields"]]
            for part, f in zip(parts, avro_type["fields"], strict=True):
                self.read(f["type"], part, lines, indent)
            lines.append(f"{indent}{target} = ({''.join(f'{p}, ' for p in parts)})")
        elif kind == "array":
            count, item = self.name("c"), self.name("x")
            lines.append(f"{indent}{target} = []")
            self.read_long(count, lines, indent)
            lines.append(f"{indent}while {count}:")
            lines.append(f"{indent}    if {count} < 0:  # a block that gives its size in bytes")
            lines.append(f"{indent}        {count} = -{count}")
            self.read_long("_", lines, indent + "        ")
            lines.append(f"{indent}    for _ in range({count}):")
            self.read(avro_type["items"], item, lines, indent + "        ")
            lines.append(f"{indent}        {target}.append({item})")
            self.read_long(count, lines, indent + "    ")
        else:
            raise UnsupportedSchemaError(f"type {kind!r}")

    @staticmethod
    def read_long(target: str, lines: list[str], indent: str) -> None:
        """A varint, its one- and two-byte cases inline (lengths of up to 8 KiB); longer ones
        through the memo (read_long refuses more than 9 bytes)."""
        lines.append(f"{indent}b = data[pos]")
        lines.append(f"{indent}if b < 128:")
        lines.append(f"{indent}    {target} = _zz[b]")
        lines.append(f"{indent}    pos += 1")
        lines.append(f"{indent}elif data[pos + 1] < 128:")
        lines.append(f"{indent}    b = (b & 127) | data[pos + 1] << 7")
        lines.append(f"{indent}    {target} = (b >> 1) ^ -(b & 1)")
        lines.append(f"{indent}    pos += 2")
        lines.append(f"{indent}else:")
        lines.append(f"{indent}    w = data[pos : pos + {MAX_READ_LONG_BYTES}]")
        lines.append(f"{indent}    e = _reads.get(w)")
        lines.append(f"{indent}    if e is None:")
        lines.append(f"{indent}        e = _read_long(data, pos, w)")
        lines.append(f"{indent}    {target} = e[0]")
        lines.append(f"{indent}    pos += e[1]")

    # --- conversion to and from the codec's form (nested records as dicts) ---------------

    def to_record(self, fields: list[Mapping[str, Any]], attribute: bool) -> str:
        items = ", ".join(
            f"{f['name']!r}: {self.convert(f['type'], _access('o', f['name'], attribute), True)}"
            for f in fields
        )
        return f"def to_record(o):\n    return {{{items}}}\n"

    def from_record(self, fields: list[Mapping[str, Any]], positional: bool) -> str:
        items = ", ".join(
            ("" if positional else f"{f['name']}=")
            + self.convert(f["type"], _access("r", f["name"], False), False)
            for f in fields
        )
        return f"def from_record(r, make):\n    return make({items})\n"

    def convert(self, avro_type: Any, value: str, to_dicts: bool) -> str:
        """An expression of ``value`` with its nested records as dicts (``to_dicts``) or tuples."""
        avro_type = self.resolve(avro_type)
        if isinstance(avro_type, list):
            _, _, other = self.union(avro_type)
            inner = self.convert(other, value, to_dicts)
            return value if inner == value else f"(None if {value} is None else {inner})"
        kind = avro_type if isinstance(avro_type, str) else avro_type["type"]
        if kind == "record":
            helper, item = self.name("_convert"), self.name("x")
            parts = []
            for i, f in enumerate(avro_type["fields"]):
                key = i if to_dicts else repr(f["name"])
                inner = self.convert(f["type"], f"{item}[{key}]", to_dicts)
                parts.append(f"{f['name']!r}: {inner}" if to_dicts else f"{inner}, ")
            body = "{" + ", ".join(parts) + "}" if to_dicts else "(" + "".join(parts) + ")"
            self.helpers.append(f"def {helper}({item}):\n    return {body}\n")
            return f"{helper}({value})"
        if kind == "array":
            item = self.name("x")
            inner = self.convert(avro_type["items"], item, to_dicts)
            return value if inner == item else f"[{inner} for {item} in {value}]"
        if kind in _PRIMITIVES or kind == "enum":
            return value
        raise UnsupportedSchemaError(f"type {kind!r}")


def _text(value: str) -> bytes:
    """Avro ``string``: its UTF-8 length, then its UTF-8 bytes."""
    data = value.encode()
    size = len(data)
    return (_ONE_BYTE_LONGS[size] if size < 64 else avro_long(size)) + data


def _blob(data: bytes) -> bytes:
    """Avro ``bytes``: the length, then the bytes."""
    size = len(data)
    return (_ONE_BYTE_LONGS[size] if size < 64 else avro_long(size)) + data


def _long_memo(prefix: bytes) -> tuple[dict[int, bytes], Callable[[int], bytes]]:
    """A memo of ``prefix`` + :func:`avro_long` of a value, and what writes a value into it
    (the generated code looks the value up first: no call when it is there)."""
    memo: dict[int, bytes] = {}

    def write_long(value: int) -> bytes:
        if len(memo) >= _MEMO_ENTRIES:
            memo.clear()
        data = memo[value] = prefix + avro_long(value)
        return data

    return memo, write_long


def _read_long_memo() -> dict[str, Any]:
    """A memo of (value, length) by the bytes a varint can span, and what reads a varint
    into it (the generated code looks the window up first: no call when it is there)."""
    memo: dict[bytes, tuple[int, int]] = {}

    def read_long_into(data: bytes, pos: int, window: bytes) -> tuple[int, int]:
        value, end = read_long(data, pos)  # raises for what it cannot read
        if len(memo) >= _MEMO_ENTRIES:
            memo.clear()
        known = memo[window] = (value, end - pos)
        return known

    return {"_reads": memo, "_read_long": read_long_into}


def _access(var: str, name: str, attribute: bool) -> str:
    return f"{var}.{name}" if attribute else f"{var}[{name!r}]"
