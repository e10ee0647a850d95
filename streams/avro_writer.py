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
boolean, int, long, float, double, string, bytes, enum, array, map, record, and unions of null
and one type; any other raises :class:`UnsupportedSchemaError`. Longs of more than one byte (epoch
milliseconds: 6 bytes, ~0.5 us to write in Python) come from bounded memos, value -> bytes
(per union branch, with its index): records that share their times write each once.

The same generator writes templates (:func:`generate_writer`'s ``params`` and after): an
encoder of some fields from its arguments, others already encoded or fixed, and runs of
fields kept by their values, for hot paths that splice records from bytes they hold.
:func:`generate_spliced_writer` builds one for records that share all but a few fields (the
jobs of a bulk load): the other fields' runs encoded once, the few spliced between them;
longs that differ in every record (``sequential``) skip the memo and reuse their upper bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streams.avro_binary import avro_long
from streams.avro_source import MEMO_ENTRIES, SchemaSource
from streams.exceptions import ConfigurationError, UnsupportedSchemaError

__all__ = ["GeneratedWriter", "SplicedWriter", "generate_spliced_writer", "generate_writer"]

_SHORT_LENGTHS = 1 << 13
_LENGTHS = tuple(avro_long(i) for i in range(_SHORT_LENGTHS))  # of strings and bytes: no call
_LOW_SEVEN_BITS = tuple(bytes([b | 0x80]) for b in range(0x80))  # a long's first byte of more
_DOUBLE = struct.Struct("<d").pack
_FLOAT = struct.Struct("<f").pack
MAX_MEMO_KEY_BYTES = 256
"""The most bytes of strings and bytes a memo of a run of fields keeps a run for."""


@dataclass(frozen=True, slots=True)
class GeneratedWriter:
    """A compiled encoder: ``encode(value)`` is the prefix and the Avro binary of ``value``;
    ``to_record(value)`` is ``value`` as the codec encodes it (a dict, nested records too)."""

    encode: Callable[..., bytes]
    to_record: Callable[[Any], dict[str, Any]]
    source: str


def generate_writer(
    schema: Mapping[str, Any],
    *,
    attribute: bool = True,
    tuple_records: bool = False,
    prefix: bytes = b"",
    params: Sequence[str] = ("o",),
    sources: Mapping[str, str] | None = None,
    encoded: Mapping[str | tuple[str, str], str] | None = None,
    constants: Mapping[str, Any] | None = None,
    enum_values: Mapping[str, Sequence[Any]] | None = None,
    memos: Sequence[tuple[str, str]] = (),
    spliced: Mapping[tuple[str, str], str] | None = None,
    sequential: Sequence[str] = (),
) -> GeneratedWriter:
    """The encoder of records of ``schema`` (a record schema as fastavro parses it), its
    output starting with ``prefix`` (e.g. the single-object header).

    By default ``encode(o)`` reads each field from ``o``; a template is written with the
    rest: ``encode`` takes ``params``; ``sources`` maps a field to the expression of its
    value over them (default: the field of the first); ``encoded`` maps a field, or a run
    ``(first, last)``, to the expression of its bytes already encoded (for a union of null
    and one type, of the other branch's value); ``constants`` fixes fields' values, encoded
    once here; ``enum_values`` gives, by an enum's full name, what stands for each symbol
    (e.g. its index); ``memos`` names runs ``(first, last)`` of fields encoded once per
    values (bounded: see :data:`MAX_MEMO_KEY_BYTES`); ``spliced`` maps runs ``(first, last)``
    to the expression of their whole bytes (see :func:`generate_spliced_writer`);
    ``sequential`` names long fields (or unions of null and long) that differ in nearly every
    record, written without a memo (see :func:`_sequential_writer`). Raises
    :class:`UnsupportedSchemaError` for a schema it writes no code for,
    ``ConfigurationError`` for fields that are not the schema's.
    """
    source = _WriteSource(
        schema.get("__named_schemas", {}), tuple_records=tuple_records, enum_values=enum_values
    )
    fields = list(schema["fields"])
    plan = _Plan(
        fields,
        params,
        attribute,
        sources or {},
        encoded or {},
        constants or {},
        memos,
        spliced or {},
        sequential,
    )
    with source.inside(schema):
        source.emit("", f"def encode({', '.join(params)}):")
        parts = [repr(prefix)] if prefix else []
        parts += plan.parts(source)
        source.emit("    ", f"return b''.join(({''.join(f'{part}, ' for part in parts)}))")
        if not (encoded or constants or sources or spliced or tuple(params) != ("o",)):
            items = ", ".join(
                f"{f['name']!r}: {source.convert(f['type'], plan.value(i), True)}"
                for i, f in enumerate(fields)
            )
            source.emit("", "def to_record(o):", f"    return {{{items}}}")
        else:
            source.emit("", "def to_record(o):", "    raise TypeError('a template')")
    text = source.text()
    source.env.update(_text=_text, _blob=_blob, _double=_DOUBLE, _float=_FLOAT)
    try:
        code = compile(text, f"<writer of {schema['name']}>", "exec")
    except (SyntaxError, RecursionError) as exc:  # nested too deep for Python's compiler
        raise UnsupportedSchemaError(f"{schema['name']}: {exc}") from exc
    exec(code, source.env)
    return GeneratedWriter(source.env["encode"], source.env["to_record"], text)


@dataclass(frozen=True, slots=True)
class SplicedWriter:
    """A template whose fields other than ``varying`` come as runs encoded once:
    ``encode_runs(record)`` is the bytes of the runs of a record dict (only those fields are
    read), ``encode(runs, *args)`` the record's bytes, the varying fields' from ``args``
    spliced between the runs (``runs`` as ``encode_runs`` returned them)."""

    encode: Callable[..., bytes]
    encode_runs: Callable[[Mapping[str, Any]], tuple[bytes, ...]]
    runs: tuple[tuple[str, str], ...]
    source: str


def generate_spliced_writer(
    schema: Mapping[str, Any],
    varying: Sequence[str],
    *,
    prefix: bytes = b"",
    params: Sequence[str] | None = None,
    sources: Mapping[str, str] | None = None,
    sequential: Sequence[str] = (),
) -> SplicedWriter:
    """The encoder of records of ``schema`` that share all fields but ``varying`` (e.g. the
    jobs of one bulk load): each maximal run of the other fields is encoded once, by an
    encoder of that run generated as a record of its own, and spliced with the varying
    fields' bytes. ``params`` (default: ``varying``) are the arguments after the runs;
    ``sources`` maps a varying field to the expression of its value over them (default: the
    parameter of its name); ``sequential`` as for :func:`generate_writer`. Raises
    ``ConfigurationError`` for a field the schema lacks,
    :class:`UnsupportedSchemaError` for a schema it writes no code for."""
    fields = list(schema["fields"])
    names = [str(f["name"]) for f in fields]
    unknown = set(varying) - set(names)
    if unknown:
        raise ConfigurationError(f"no field {sorted(unknown)}")
    spans: list[range] = []
    start: int | None = None
    for index, name in enumerate([*names, None]):
        constant = name is not None and name not in varying
        if constant and start is None:
            start = index
        elif not constant and start is not None:
            spans.append(range(start, index))
            start = None
    runs = tuple((names[span.start], names[span[-1]]) for span in spans)
    template = generate_writer(
        schema,
        attribute=False,
        prefix=prefix,
        params=("runs", *(varying if params is None else params)),
        sources={name: name for name in varying} | dict(sources or {}),
        spliced={run: f"runs[{i}]" for i, run in enumerate(runs)},
        sequential=sequential,
    )
    writers = tuple(
        generate_writer({**schema, "fields": fields[span.start : span.stop]}, attribute=False)
        for span in spans
    )

    def encode_runs(record: Mapping[str, Any]) -> tuple[bytes, ...]:
        return tuple(writer.encode(record) for writer in writers)

    source = "\n".join([template.source, *(writer.source for writer in writers)])
    return SplicedWriter(template.encode, encode_runs, runs, source)


class _Plan:
    """Where each field's bytes come from: read and written, given encoded, a constant, or a
    memo of its run's values."""

    def __init__(
        self,
        fields: list[Mapping[str, Any]],
        params: Sequence[str],
        attribute: bool,
        sources: Mapping[str, str],
        encoded: Mapping[str | tuple[str, str], str],
        constants: Mapping[str, Any],
        memos: Sequence[tuple[str, str]],
        spliced: Mapping[tuple[str, str], str],
        sequential: Sequence[str],
    ) -> None:
        self.fields = fields
        self.names = [str(f["name"]) for f in fields]
        self.params = ", ".join(params)
        self.constants = constants
        self.values = [
            sources.get(name) or _access(params[0], name, attribute) for name in self.names
        ]
        # first index -> (stop, bytes expression, whole: a union's branch index included)
        self.given: dict[int, tuple[int, str, bool]] = {}
        for run, expression in encoded.items():
            first, last = (run, run) if isinstance(run, str) else run
            span = self.span(first, last)
            self.given[span.start] = (span.stop, expression, False)
        for (first, last), expression in spliced.items():
            span = self.span(first, last)
            self.given[span.start] = (span.stop, expression, True)
        self.memos = {self.span(*run).start: self.span(*run) for run in memos}
        self.sequential = frozenset(sequential)
        unknown = (set(sources) | set(constants) | self.sequential) - set(self.names)
        if unknown:
            raise ConfigurationError(f"no field {sorted(unknown)}")

    def span(self, first: str, last: str) -> range:
        if first not in self.names or last not in self.names:
            raise ConfigurationError(f"no field {first} or {last}")
        span = range(self.names.index(first), self.names.index(last) + 1)
        if not span:
            raise ConfigurationError(f"{first}..{last} is empty")
        return span

    def value(self, index: int) -> str:
        return self.values[index]

    def parts(self, source: _WriteSource) -> list[str]:
        """The expressions of the record's bytes in order, constants merged."""
        parts: list[str | bytes] = []
        index = 0
        while index < len(self.fields):
            if index in self.given:
                stop, expression, whole = self.given[index]
                f = self.fields[index]
                if not whole and stop - index == 1 and source.kind_of(f["type"]) == "union":
                    parts.append(source.branch_byte(f["type"]))
                parts.append(expression)
                index = stop
            elif index in self.memos:
                span = self.memos[index]
                parts.append(source.memo_run(self, span, self.params))
                index = span.stop
            else:
                parts.append(self.field(source, index))
                index += 1
        merged: list[str] = []
        run = b""
        for part in parts:
            if isinstance(part, bytes):
                run += part
                continue
            if run:
                merged.append(repr(run))
                run = b""
            merged.append(part)
        return merged + ([repr(run)] if run else [])

    def field(self, source: _WriteSource, index: int) -> str | bytes:
        """The bytes of one field: a constant's, or an expression writing its value."""
        f, name = self.fields[index], self.names[index]
        if name in self.constants:
            return source.constant_bytes(f["type"], self.constants[name])
        if name in self.sequential:
            return source.write_sequential(f["type"], self.values[index])
        return source.write(f["type"], self.values[index])


class _WriteSource(SchemaSource):
    """Writes expressions of the Avro binary of values, and the helpers they call."""

    def __init__(
        self,
        named: Mapping[str, Any],
        *,
        tuple_records: bool,
        enum_values: Mapping[str, Sequence[Any]] | None,
    ) -> None:
        super().__init__(named, tuple_records=tuple_records)
        self.enum_values = enum_values or {}

    def branch_byte(self, avro_type: Any) -> bytes:
        """The index byte of the branch other than null of a union of null and one type."""
        branches = self.resolve(avro_type)
        if len(branches) != 2 or "null" not in branches:
            raise UnsupportedSchemaError(f"union {branches!r} (only null and one type)")
        return avro_long(1 - branches.index("null"))

    def constant_bytes(self, avro_type: Any, value: Any) -> bytes:
        """The bytes of ``value``, written now by the code written for ``avro_type``."""
        one = _WriteSource(
            self.named, tuple_records=self.tuple_records, enum_values=self.enum_values
        )
        expression = one.write(avro_type, "v")
        env = {**one.env, "_text": _text, "_blob": _blob, "_double": _DOUBLE, "_float": _FLOAT}
        exec("\n".join([*one.helpers, f"def one(v):\n    return {expression}\n"]), env)
        data: bytes = env["one"](value)
        return data

    def memo_run(self, plan: _Plan, span: range, params: str) -> str:
        """A name holding the bytes of the fields in ``span``, encoded once per their values:
        the key is the tuple of their values (zeros of doubles by their bytes: 0.0 == -0.0),
        not kept when its strings and bytes hold more than :data:`MAX_MEMO_KEY_BYTES`."""
        run = self.local("_run")
        parts: list[str] = []
        leaves: list[str] = []
        sized: list[str] = []
        for index in span:
            f = plan.fields[index]
            part = plan.field(self, index)
            parts.append(repr(part) if isinstance(part, bytes) else part)
            if plan.names[index] not in plan.constants:
                self.leaves(f["type"], plan.values[index], leaves, sized)
        self.helpers.append(
            f"def {run}({params}):\n    return b''.join(({''.join(f'{p}, ' for p in parts)}))\n"
        )
        memo: dict[tuple[Any, ...], bytes] = {}
        name, key = self.constant("memo", memo), self.local("k")
        keep = self.constant("keep", _run_keeper(memo))
        size = " + ".join(f"len({leaf})" for leaf in sized) or "0"
        self.emit("    ", f"{key} = ({''.join(f'{leaf}, ' for leaf in leaves)})")
        self.emit("    ", f"{run}b = {name}.get({key})", f"if {run}b is None:")
        self.emit("    ", f"    {run}b = {keep}({key}, {size}, {run}({params}))")
        return f"{run}b"

    def leaves(self, avro_type: Any, value: str, leaves: list[str], sized: list[str]) -> None:
        """Append the expressions of the hashable parts of ``value`` that decide its bytes."""
        kind = self.kind_of(avro_type)
        avro_type = self.resolve(avro_type)
        if kind == "record":
            with self.inside(avro_type):
                for i, f in enumerate(avro_type["fields"]):
                    self.leaves(f["type"], self.field_of(value, i, str(f["name"])), leaves, sized)
            return
        other = kind
        if kind == "union":
            branch = self.resolve(avro_type[1 - avro_type.index("null")])
            other = self.kind_of(branch)
        if other in ("record", "array", "map", "union"):
            raise UnsupportedSchemaError(f"a memo of values of type {avro_type!r}")
        if other in ("float", "double"):  # 0.0 == -0.0, their bytes differ: key zeros by bytes
            leaves.append(f"({value} if {value} or {value} is None else _double({value}))")
        else:
            leaves.append(value)
        if other in ("string", "bytes"):
            sized.append(value if kind != "union" else f"({value} or b'')")

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
            if self.kind_of(other) in ("int", "long"):  # the branch index memoized with the value
                other_bytes = self.memo_long(other_byte, value)
            else:
                other_bytes = f"{other_byte!r} + {self.write(other, value)}"
            return f"({null_byte!r} if {value} is None else {other_bytes})"
        if kind == "null":
            return "b''"
        if kind == "boolean":
            return f"(b'\\x01' if {value} else b'\\x00')"
        if kind in ("int", "long"):  # the same varint (fastavro writes an int as a long)
            return self.memo_long(b"", value)
        if kind == "double":
            return f"_double({value})"
        if kind == "float":
            return f"_float({value})"
        if kind == "string":
            return f"_text({value})"
        if kind == "bytes":
            return f"_blob({value})"
        if kind == "enum":
            values = self.enum_values.get(str(avro_type["name"]), avro_type["symbols"])
            symbols = {v: avro_long(i) for i, v in enumerate(values)}
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
        if kind == "map":
            return self.write_map(avro_type["values"], value)
        raise UnsupportedSchemaError(f"type {kind!r}")

    def field_of(self, record: str, index: int, name: str) -> str:
        """An expression of a nested record's field."""
        return f"{record}[{index if self.tuple_records else repr(name)}]"

    def write_array(self, items: Any, value: str) -> str:
        """One block of all the items (none: the end byte alone), by a helper."""
        helper, item = self.local("_write_array"), self.local("x")
        count = self.memo_long(b"", "len(v)")
        entry = f"{self.write(items, item)} for {item} in v"
        return self.write_block(helper, count, entry, value)

    def write_map(self, values: Any, value: str) -> str:
        """One block of all the entries (none: the end byte alone), by a helper."""
        helper, key, item = self.local("_write_map"), self.local("k"), self.local("x")
        count = self.memo_long(b"", "len(v)")
        entry = f"_text({key}) + {self.write(values, item)} for {key}, {item} in v.items()"
        return self.write_block(helper, count, entry, value)

    def write_block(self, helper: str, count: str, entries: str, value: str) -> str:
        """An expression of the one block of an array or map ``value`` (none: the end byte
        alone) by ``helper``, which writes ``count`` then the bytes of each of ``entries``
        (a comprehension's body over its argument ``v``)."""
        self.helpers.append(
            f"def {helper}(v):\n    return b''.join([{count}, *[{entries}], b'\\x00'])\n"
        )
        return f"({helper}({value}) if {value} else b'\\x00')"

    def write_sequential(self, avro_type: Any, value: str) -> str:
        """:meth:`write` of a long, or a union of null and long, without a memo."""
        kind = self.kind_of(avro_type)
        avro_type = self.resolve(avro_type)
        if kind in ("int", "long"):
            return f"{self.constant('sequential', _sequential_writer(b''))}({value})"
        if not (
            kind == "union"
            and len(avro_type) == 2
            and "null" in avro_type
            and self.kind_of(avro_type[1 - avro_type.index("null")]) in ("int", "long")
        ):
            raise UnsupportedSchemaError(f"a sequential {avro_type!r} (only longs)")
        null_at = avro_type.index("null")
        write = self.constant("sequential", _sequential_writer(avro_long(1 - null_at)))
        return f"({avro_long(null_at)!r} if {value} is None else {write}({value}))"

    def memo_long(self, prefix: bytes, value: str) -> str:
        """An expression of ``prefix`` and the long ``value``, from a memo once written."""
        memo: dict[int, bytes] = {}
        name = self.constant("longs", memo)
        write = self.constant("write_long", _long_writer(memo, prefix))
        return f"({name}.get({value}) or {write}({value}))"


def _run_keeper(memo: dict[tuple[Any, ...], bytes]) -> Callable[..., bytes]:
    """What keeps a run's bytes by its values' key in ``memo`` (bounded) and returns them."""

    def keep(key: tuple[Any, ...], size: int, data: bytes) -> bytes:
        if size <= MAX_MEMO_KEY_BYTES:
            if len(memo) >= MEMO_ENTRIES:
                memo.clear()
            memo[key] = data
        return data

    return keep


def _long_writer(memo: dict[int, bytes], prefix: bytes) -> Callable[[int], bytes]:
    """What writes ``prefix`` + :func:`avro_long` of a value into ``memo`` (the generated
    code looks the value up first: no call when it is there)."""
    write = _sequential_writer(prefix)

    def write_long(value: int) -> bytes:
        if len(memo) >= MEMO_ENTRIES:
            memo.clear()
        data = memo[value] = write(value)
        return data

    return write_long


def _sequential_writer(prefix: bytes) -> Callable[[int], bytes]:
    """What writes ``prefix`` + :func:`avro_long` of a value, reusing the bytes after the
    first from the last value written when they are the same: they are the zig-zag value's
    bits above the low seven, which increasing versions and times (a bulk load's) share 127
    times in 128 (~0.25 us a long instead of ~0.6)."""
    last = [(-1, b"")]  # one tuple: a concurrent caller never sees half an update

    def write(value: int) -> bytes:
        if value < 64:  # negative, or one byte
            return prefix + avro_long(value)
        zigzag = value << 1
        high, upper = last[0]
        if zigzag >> 7 != high:
            upper = avro_long(value)[1:]
            last[0] = (zigzag >> 7, upper)
        return prefix + _LOW_SEVEN_BITS[zigzag & 0x7F] + upper

    return write


def _text(value: str) -> bytes:
    """Avro ``string``: its UTF-8 length, then its UTF-8 bytes."""
    data = value.encode()
    size = len(data)
    return (_LENGTHS[size] if size < _SHORT_LENGTHS else avro_long(size)) + data


def _blob(data: bytes) -> bytes:
    """Avro ``bytes``: the length, then the bytes."""
    size = len(data)
    return (_LENGTHS[size] if size < _SHORT_LENGTHS else avro_long(size)) + data


def _access(var: str, name: str, attribute: bool) -> str:
    return f"{var}.{name}" if attribute else f"{var}[{name!r}]"
