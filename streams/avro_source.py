"""Python source generated from one Avro schema: the pieces its decoders and encoders share.

:class:`SchemaSource` is what both need: named types resolved (and what is unsupported
refused), local names and constants for the generated code, a guard against records that
contain themselves, and conversions between the two forms a nested record can take (a dict,
the codec's form, or a tuple of its fields' values in schema order, ``tuple_records``).
:class:`ValueSource` adds the lines that read one value at ``pos`` of ``data``:
:mod:`streams.avro_reader` assembles them into the straight-line decoder of one record, and
:mod:`streams.avro_writer` writes encoders on :class:`SchemaSource`.

Each piece reads a value exactly as fastavro reads it (same value, same type, a fresh
container) or raises ``ValueError`` or ``IndexError`` (``UnicodeDecodeError`` is a
``ValueError``) where it cannot be sure of doing so: a varint longer than 9 bytes
(:func:`~streams.avro_binary.read_long`), a negative length, a length past the end, invalid
UTF-8, an enum index or union branch out of range, a boolean byte other than 0 or 1, a union
branch not written in one byte. The caller then hands the record to the codec, which returns
it or names what is wrong with it.

A value read only to be checked (``target`` None) is parsed as strictly and kept nowhere;
runs of such values of a fixed layout (numbers, enums, unions and records of those) are
checked by one regular expression, which accepts only encodings the codec reads. Longs of
more than two bytes may go through a bounded memo (``memo_longs``): the (up to) 9 bytes at
a long's position -> (value, length), since the bytes of a varint up to its last byte decide
both; records that share their times (a herd's) then read each once.

Invariant: ``pos`` never passes the end of ``data``. Lengths are checked against it where
they are read, although the decoder's final "nothing left over" check would refuse such a
record anyway, because a regular expression asked to match past the end matches at the
end: an empty match there would move ``pos`` back.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from streams.avro_binary import MAX_READ_LONG_BYTES, read_long
from streams.codec import fresh_copy
from streams.exceptions import UnsupportedSchemaError

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_VARINT = rb"[\x80-\xff]{0,%d}[\x00-\x7f]" % (MAX_READ_LONG_BYTES - 1)
# A varint as fastavro writes one: the shortest form (a last byte of 0 only alone), 64 bits.
_CANONICAL_VARINT = rb"(?:[\x00-\x7f]|[\x80-\xff]{1,8}[\x01-\x7f]|[\x80-\xff]{9}\x01)"
_CANONICAL_LONG_BYTES = 10
_ONE_BYTE_INDICES = 64  # union branches and enum symbols whose index is written in one byte
MEMO_ENTRIES = 4096
"""Bounds each memo of longs (a full memo starts over)."""


def _escaped(*values: int) -> bytes:
    return b"".join(b"\\x%02x" % value for value in values)


class SchemaSource:
    """The generated code of one schema being written: its lines, the objects they name, and
    what every generator asks of the schema.

    ``named`` maps full names to definitions (fastavro's ``__named_schemas``); ``env``
    becomes the globals of the compiled code, ``helpers`` are functions written beside the
    main ones. A nested record is a dict of its fields, or (``tuple_records``) a tuple of
    their values in schema order.
    """

    def __init__(self, named: Mapping[str, Any], *, tuple_records: bool = False) -> None:
        self.named = named
        self.tuple_records = tuple_records
        self.lines: list[str] = []
        self.helpers: list[str] = []
        self.env: dict[str, Any] = {}
        self._count = 0
        self._records: list[str] = []  # the records being written for, to refuse recursion

    def local(self, prefix: str) -> str:
        """A name no other line uses."""
        self._count += 1
        return f"{prefix}{self._count}"

    def constant(self, prefix: str, value: Any) -> str:
        """A global name for ``value`` in the compiled code."""
        name = self.local(f"_{prefix}")
        self.env[name] = value
        return name

    def emit(self, indent: str, *lines: str) -> None:
        self.lines.extend(indent + line for line in lines)

    def text(self) -> str:
        """The source to compile: the helpers, then the lines."""
        return "\n".join([*self.helpers, *self.lines]) + "\n"

    def resolve(self, avro_type: Any) -> Any:
        """``avro_type`` with a name replaced by its definition; refuses what is unsupported."""
        if isinstance(avro_type, str) and avro_type not in _PRIMITIVES:
            if avro_type not in self.named:
                raise UnsupportedSchemaError(f"unknown type name {avro_type!r}")
            avro_type = self.named[avro_type]
        if isinstance(avro_type, dict):
            if "logicalType" in avro_type:  # fastavro may convert it: a datetime, a Decimal
                raise UnsupportedSchemaError(f"logical type {avro_type['logicalType']!r}")
            if avro_type["type"] in _PRIMITIVES:
                return avro_type["type"]
        return avro_type

    def kind_of(self, avro_type: Any) -> str:
        """The type's name: a primitive, "union", "record", "enum", "array", "map", "fixed"."""
        avro_type = self.resolve(avro_type)
        if isinstance(avro_type, list):
            return "union"
        if isinstance(avro_type, str):
            return avro_type
        kind: str = avro_type["type"]
        return "record" if kind == "error" else kind

    @contextmanager
    def inside(self, schema: Mapping[str, Any]) -> Iterator[None]:
        """Write code for the fields of the record ``schema``; refuses one inside itself."""
        name = str(schema["name"])
        if name in self._records:
            raise UnsupportedSchemaError(f"record {name} contains itself")
        self._records.append(name)
        try:
            yield
        finally:
            self._records.pop()

    def holds_record(self, avro_type: Any) -> bool:
        """Do values of ``avro_type`` contain a nested record?"""
        kind = self.kind_of(avro_type)
        avro_type = self.resolve(avro_type)
        if kind == "union":
            return any(self.holds_record(branch) for branch in avro_type)
        if kind in ("array", "map"):
            return self.holds_record(avro_type["items" if kind == "array" else "values"])
        return kind == "record"

    def convert(self, avro_type: Any, value: str, to_dicts: bool) -> str:
        """An expression of ``value`` (a name or an index: cheap to repeat) with its nested
        records as dicts (``to_dicts``) or as tuples; ``value`` itself when there are none
        (or when they are dicts already: not ``tuple_records``)."""
        if not self.tuple_records or not self.holds_record(avro_type):
            return value
        kind = self.kind_of(avro_type)
        avro_type = self.resolve(avro_type)
        if kind == "union":
            others = [branch for branch in avro_type if self.kind_of(branch) != "null"]
            if len(others) != 1 or len(avro_type) != 2:  # a record or what else?
                raise UnsupportedSchemaError(f"union {avro_type!r} of records as tuples")
            return f"(None if {value} is None else {self.convert(others[0], value, to_dicts)})"
        if kind in ("array", "map"):
            item = self.local("x")
            if kind == "array":
                return f"[{self.convert(avro_type['items'], item, to_dicts)} for {item} in {value}]"
            key = self.local("k")
            inner = self.convert(avro_type["values"], item, to_dicts)
            return f"{{{key}: {inner} for {key}, {item} in {value}.items()}}"
        helper, item = self.local("_convert"), self.local("x")
        with self.inside(avro_type):
            parts = []
            for i, f in enumerate(avro_type["fields"]):
                inner = self.convert(
                    f["type"], f"{item}[{i if to_dicts else repr(f['name'])}]", to_dicts
                )
                parts.append(f"{f['name']!r}: {inner}, " if to_dicts else f"{inner}, ")
        body = "{" + "".join(parts) + "}" if to_dicts else "(" + "".join(parts) + ")"
        self.helpers.append(f"def {helper}({item}):\n    return {body}\n")
        return f"{helper}({value})"


class ValueSource(SchemaSource):
    """Writes the lines that read values of one schema, and the objects those lines name.

    The lines use the locals ``data``, ``pos`` and ``size`` (``len(data)``) and names from
    :meth:`local`. ``memo_longs``: longs of more than two bytes are read through a memo
    (see the module). ``enum_values``: by an enum's full name, the value of each symbol in
    order (an index, a ``StrEnum`` member) read in place of the symbol. ``canonical``: every
    varint (numbers, lengths, indices) only in the form fastavro writes (the shortest, of
    up to 10 bytes: every 64-bit value), any other form refused, so that the bytes of a
    value are what encoding it again gives (a reader that splices them into other records).
    """

    def __init__(
        self,
        named: Mapping[str, Any],
        *,
        tuple_records: bool = False,
        memo_longs: bool = False,
        enum_values: Mapping[str, Sequence[Any]] | None = None,
        canonical: bool = False,
    ) -> None:
        super().__init__(named, tuple_records=tuple_records)
        self.memo_longs = memo_longs
        self.enum_values = dict(enum_values or {})
        self.canonical = canonical
        self.long_bytes = _CANONICAL_LONG_BYTES if canonical else MAX_READ_LONG_BYTES
        self.env.update(
            {
                "_long": read_canonical_long if canonical else read_long,
                "_zz": tuple((i >> 1) ^ -(i & 1) for i in range(0x80)),
                "_len": tuple(i >> 1 if i < 0x80 and not i & 1 else -1 for i in range(0x100)),
                "_fresh_copy": _fresh_copy_with_tuples if tuple_records else fresh_copy,
            }
        )
        if memo_longs:
            self.env.update(_read_long_memo(self.env["_long"]))

    # --- reading -----------------------------------------------------------------------

    def read_fields(
        self,
        types: Sequence[Any],
        targets: Sequence[str | None],
        indent: str,
        *,
        last: bool = False,
    ) -> None:
        """Read consecutive values into ``targets`` (None: check and drop); a run of dropped
        values of a fixed layout is checked by one regular expression (which, for the ``last``
        values of the record, also checks that nothing follows them)."""
        i = 0
        while i < len(types):
            run = i
            patterns = []
            while run < len(types) and targets[run] is None:
                pattern = self.pattern(types[run])
                if pattern is None:
                    break
                patterns.append(pattern)
                run += 1
            if run - i >= 2 or (run - i == 1 and self.kind_of(types[i]) == "record"):
                regex = re.compile(b"".join(patterns))
                if last and run == len(types):
                    self.emit(indent, f"if {self.constant('layout', regex.fullmatch)}(data, pos):")
                    self.emit(indent, "    pos = size")
                else:
                    self.emit(indent, f"m = {self.constant('layout', regex.match)}(data, pos)")
                    self.emit(indent, "if m:", "    pos = m.end()")
                self.emit(indent, "else:")
                self.emit(
                    indent, "    raise ValueError('not of the schema, or not in its usual form')"
                )
                i = run
            else:
                self.read(types[i], targets[i], indent)
                i += 1

    def read(self, avro_type: Any, target: str | None, indent: str) -> None:
        """Append the lines reading one value at ``pos`` into ``target`` (None: drop it)."""
        kind = self.kind_of(avro_type)
        avro_type = self.resolve(avro_type)
        if kind == "null":
            if target is not None:
                self.emit(indent, f"{target} = None")
        elif kind == "boolean":
            self.emit(indent, "b = data[pos]", "if b > 1:", "    raise ValueError('boolean byte')")
            if target is not None:
                self.emit(indent, f"{target} = b == 1")
            self.emit(indent, "pos += 1")
        elif kind in ("int", "long"):  # fastavro reads an int as a long, unbounded
            self.read_long(target, indent)
        elif kind in ("float", "double", "fixed"):
            self.read_fixed_width(kind, avro_type, target, indent)
        elif kind in ("string", "bytes"):
            self.read_sized(kind == "string", target, indent)
        elif kind == "enum":
            values = self.enum_values.get(str(avro_type["name"]))
            self.read_enum(avro_type["symbols"], target, indent, values)
        elif kind == "union":
            self.read_union(avro_type, target, indent)
        elif kind == "record":
            self.read_record(avro_type, target, indent)
        elif kind in ("array", "map"):
            self.read_blocks(avro_type, target, indent)
        else:
            raise UnsupportedSchemaError(f"type {kind!r}")

    def read_long(self, target: str | None, indent: str) -> None:
        """A varint, its one- and two-byte cases inline (lengths of up to 8 KiB), a longer
        one through the memo (``memo_longs``) or :func:`read_long`."""
        if target is None:
            self.emit(indent, "if data[pos] < 128:", "    pos += 1", "else:")
            self.emit(indent, "    pos = _long(data, pos)[1]")
            return
        self.emit(indent, "b = data[pos]", "if b < 128:", f"    {target} = _zz[b]", "    pos += 1")
        second = "0 < data[pos + 1] < 128" if self.canonical else "data[pos + 1] < 128"
        self.emit(indent, f"elif {second}:", "    b = (b & 127) | data[pos + 1] << 7")
        self.emit(indent, f"    {target} = (b >> 1) ^ -(b & 1)", "    pos += 2", "else:")
        if not self.memo_longs:
            self.emit(indent, f"    {target}, pos = _long(data, pos)")
            return
        self.emit(indent, f"    w = data[pos : pos + {self.long_bytes}]", "    e = _reads.get(w)")
        self.emit(indent, "    if e is None:", "        e = _read_long(data, pos, w)")
        self.emit(indent, f"    {target} = e[0]", "    pos += e[1]")

    def read_fixed_width(self, kind: str, avro_type: Any, target: str | None, indent: str) -> None:
        width = {"float": 4, "double": 8}.get(kind) or int(avro_type["size"])
        self.emit(indent, f"end = pos + {width}", "if end > size:")
        self.emit(indent, "    raise ValueError('value past the end')")
        if target is not None and kind == "fixed":
            self.emit(indent, f"{target} = data[pos:end]")
        elif target is not None:
            unpack = self.constant(
                kind, struct.Struct("<f" if kind == "float" else "<d").unpack_from
            )
            self.emit(indent, f"{target} = {unpack}(data, pos)[0]")
        self.emit(indent, "pos = end")

    def read_sized(
        self, text: bool, target: str | None, indent: str, *, content: str | None = None
    ) -> None:
        """A string (its UTF-8 checked even when dropped) or bytes; a short length inline.
        ``content``: a local for the bytes of a string too (its UTF-8)."""
        self.emit(indent, "n = _len[data[pos]]", "if n < 0:")
        self.read_long("n", indent + "    ")
        self.emit(indent, "    if n < 0:", "        raise ValueError('negative length')")
        self.emit(indent, "else:", "    pos += 1", "end = pos + n", "if end > size:")
        self.emit(indent, "    raise ValueError('length past the end')")
        value = "data[pos:end].decode()" if text else "data[pos:end]"
        if content is not None:
            self.emit(indent, f"{content} = data[pos:end]")
            value = f"{content}.decode()"
        if target is not None:
            self.emit(indent, f"{target} = {value}")
        elif text:
            self.emit(indent, value)
        self.emit(indent, "pos = end")

    def read_enum(
        self,
        symbols: Sequence[str],
        target: str | None,
        indent: str,
        values: Sequence[Any] | None = None,
    ) -> None:
        """An index in one byte by table; any other form read as a long and checked. The
        value is the symbol, or ``values[index]`` (``enum_values``: not None, one a symbol)."""
        count = len(symbols)
        if values is None:
            values = symbols
        elif len(values) != count or any(value is None for value in values):
            raise UnsupportedSchemaError(f"enum values {values!r} for symbols {symbols!r}")
        table: list[Any] = [None] * 0x100
        for i, value in enumerate(values[:_ONE_BYTE_INDICES]):
            table[2 * i] = value
        by_byte = self.constant("enum", tuple(table))
        by_index = self.constant("symbols", tuple(values))
        value = target or "x"
        self.emit(indent, f"{value} = {by_byte}[data[pos]]", f"if {value} is None:")
        self.emit(indent, "    n, pos = _long(data, pos)", f"    if not 0 <= n < {count}:")
        self.emit(indent, "        raise ValueError('enum index out of range')")
        if target is not None:
            self.emit(indent, f"    {target} = {by_index}[n]")
        self.emit(indent, "else:", "    pos += 1")

    def read_union(self, branches: Sequence[Any], target: str | None, indent: str) -> None:
        """The branch index in one byte (any other form goes to the codec), then its value."""
        self.emit(indent, "b = data[pos]")
        for i, branch in enumerate(branches[:_ONE_BYTE_INDICES]):
            self.emit(indent, f"{'if' if i == 0 else 'elif'} b == {2 * i}:", "    pos += 1")
            self.read(branch, target, indent + "    ")
        self.emit(indent, "else:", "    raise ValueError('union branch')")

    def read_record(self, schema: Mapping[str, Any], target: str | None, indent: str) -> None:
        """A nested record: a dict, or (``tuple_records``) a tuple of its values."""
        with self.inside(schema):
            fields = schema["fields"]
            parts = [None if target is None else self.local("r") for _ in fields]
            self.read_fields([f["type"] for f in fields], parts, indent)
        if target is None:
            return
        if self.tuple_records:
            self.emit(indent, f"{target} = ({''.join(f'{p}, ' for p in parts)})")
        else:
            items = ", ".join(f"{f['name']!r}: {p}" for f, p in zip(fields, parts, strict=True))
            self.emit(indent, f"{target} = {{{items}}}")

    def read_blocks(self, schema: Mapping[str, Any], target: str | None, indent: str) -> None:
        """An array or map: blocks of a count (negative: a byte size follows) until count 0."""
        is_map = schema["type"] == "map"
        count = self.local("c")
        item = None if target is None else self.local("x")
        key = None if target is None else self.local("k")
        if target is not None:
            self.emit(indent, f"{target} = {{}}" if is_map else f"{target} = []")
        self.read_long(count, indent)
        self.emit(indent, f"while {count}:", f"    if {count} < 0:", f"        {count} = -{count}")
        self.read_long(None, indent + "        ")
        self.emit(indent, f"    for _ in range({count}):")
        inner = indent + "        "
        if is_map:
            self.read_sized(True, key, inner)
            self.read(schema["values"], item, inner)
            if target is not None:
                self.emit(inner, f"{target}[{key}] = {item}")
        else:
            lines = len(self.lines)
            self.read(schema["items"], item, inner)
            if target is not None:
                self.emit(inner, f"{target}.append({item})")
            elif len(self.lines) == lines:  # items of no bytes (null, an empty record)
                self.emit(inner, "pass")
        self.read_long(count, indent + "    ")

    # --- regular expressions of fixed layouts -------------------------------------------

    def pattern(self, avro_type: Any) -> bytes | None:
        """A regular expression matching the usual encodings of a value of ``avro_type``
        (ones the codec reads), or None when its layout is not fixed (lengths, blocks)."""
        kind = self.kind_of(avro_type)
        avro_type = self.resolve(avro_type)
        if kind == "null":
            return b""
        if kind == "boolean":
            return b"[" + _escaped(0, 1) + b"]"
        if kind in ("int", "long"):
            return _CANONICAL_VARINT if self.canonical else _VARINT
        if kind in ("float", "double", "fixed"):
            width = {"float": 4, "double": 8}.get(kind) or int(avro_type["size"])
            return b"[\\x00-\\xff]{%d}" % width
        if kind == "enum" and len(avro_type["symbols"]) <= _ONE_BYTE_INDICES:
            return b"[" + _escaped(*range(0, 2 * len(avro_type["symbols"]), 2)) + b"]"
        if kind == "union" and len(avro_type) <= _ONE_BYTE_INDICES:
            branches = [self.pattern(branch) for branch in avro_type]
            if all(branch is not None for branch in branches):
                options = [_escaped(2 * i) + (p or b"") for i, p in enumerate(branches)]
                return b"(?:" + b"|".join(options) + b")"
        if kind == "record" and str(avro_type["name"]) not in self._records:
            self._records.append(str(avro_type["name"]))
            parts = [self.pattern(f["type"]) for f in avro_type["fields"]]
            self._records.pop()
            if all(part is not None for part in parts):
                return b"".join(part or b"" for part in parts)
        return None

    # --- fresh copies of kept values ----------------------------------------------------

    def fresh(self, avro_type: Any, value: str) -> str | None:
        """An expression of a copy of ``value`` (a name) sharing no container with it, or None
        when values of ``avro_type`` hold no container."""
        if not self.mutable(avro_type):
            return None
        kind = self.kind_of(avro_type)
        avro_type = self.resolve(avro_type)
        if kind == "record" and self.tuple_records:
            return f"_fresh_copy({value})"
        if kind == "record" and not any(self.mutable(f["type"]) for f in avro_type["fields"]):
            return f"{value}.copy()"
        if kind == "array" and not self.mutable(avro_type["items"]):
            return f"{value}.copy()"
        if kind == "map" and not self.mutable(avro_type["values"]):
            return f"{value}.copy()"
        if kind == "union":
            mutable = [b for b in avro_type if self.mutable(b)]
            others = [b for b in avro_type if not self.mutable(b)]
            if len(mutable) == 1 and others == ["null"]:
                inner = self.fresh(mutable[0], value)
                return f"(None if {value} is None else {inner})"
        return f"_fresh_copy({value})"

    def mutable(self, avro_type: Any) -> bool:
        """Do values of ``avro_type`` hold a dict or a list?"""
        kind = self.kind_of(avro_type)
        if kind == "union":
            return any(self.mutable(branch) for branch in self.resolve(avro_type))
        if kind == "record" and self.tuple_records:
            with self.inside(self.resolve(avro_type)):
                return any(self.mutable(f["type"]) for f in self.resolve(avro_type)["fields"])
        return kind in ("record", "array", "map")


def _fresh_copy_with_tuples(value: Any) -> Any:
    """:func:`~streams.codec.fresh_copy` of a value whose nested records are tuples."""
    if isinstance(value, dict):
        return {k: _fresh_copy_with_tuples(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fresh_copy_with_tuples(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_fresh_copy_with_tuples(v) for v in value)
    return value


def read_canonical_long(data: bytes, pos: int) -> tuple[int, int]:
    """The Avro long at ``pos`` and the position after it, if written as fastavro writes it
    (the shortest form, at most 10 bytes); raises ``ValueError`` for any other form and
    ``IndexError`` when ``data`` ends inside it."""
    byte = data[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    value = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if byte == 0 or (shift == 63 and byte != 1):
                raise ValueError("varint not in its shortest form, or past 64 bits")
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _read_long_memo(read: Callable[[bytes, int], tuple[int, int]]) -> dict[str, Any]:
    """A memo of (value, length) by the bytes a varint can span, and what reads a varint
    into it with ``read`` (the generated code looks the window up first: no call when it is
    there)."""
    memo: dict[bytes, tuple[int, int]] = {}

    def read_long_into(data: bytes, pos: int, window: bytes) -> tuple[int, int]:
        value, end = read(data, pos)  # raises for what it cannot read
        if len(memo) >= MEMO_ENTRIES:
            memo.clear()
        known = memo[window] = (value, end - pos)
        return known

    return {"_reads": memo, "_read_long": read_long_into}
