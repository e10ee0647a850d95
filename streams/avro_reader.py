"""Straight-line decoders of one Avro record, generated from its schema and compiled once.

fastavro's generic reader walks the schema for every record (~12-14 us for a Job or an
ExecutionResult); the hot loops need a few microseconds. :func:`generate_reader` writes the
Python source of a decoder for one record schema (as fastavro parses it: a writer schema
read as itself, no resolution) from the pieces of :mod:`streams.avro_source`, like the
bounds checks of :mod:`streams.bounds`, and compiles it with ``exec``. Nothing is written
by hand per record: the ``.avsc`` stays the one source.

A decoder returns exactly what ``Codec.decode(kind, data, check=False)`` returns for the
same bytes (the same dict, fresh containers per record), or raises ``ValueError`` or
``IndexError`` for bytes it cannot be sure of (see :mod:`streams.avro_source`) and for
bytes left after the record: the caller then hands the record to the codec. ``fields``
makes it return only those top-level fields, as a tuple, while still checking every other
field exactly; ``make`` builds an object of the values instead (``make(*values)``), and
``tuple_records`` makes nested records tuples (:mod:`streams.avro_writer` encodes values of
that form). :attr:`GeneratedReader.from_record` turns what the codec decoded into what the
decoder returns, for the records left to the codec.

:class:`Memo` names a run of consecutive top-level fields whose values are kept by their
bytes: Avro encodings are prefix-free, so bytes at the run's position equal to bytes that
once parsed to the run read as the same values and end at the same place. The decoder
compares the bytes there with the run it saw last (then with the runs it keeps, by their
lengths; a run that ends the record, by the rest of the bytes) and reuses their values,
else parses the run and keeps it once the whole record is read (bounded). This is what
makes the readers of records that share most of their bytes (one bulk load's jobs, one
executor's results, a herd's timer states) several times cheaper than parsing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streams.avro_source import ValueSource
from streams.bounds import Check
from streams.exceptions import ConfigurationError, InvalidRecordError, UnsupportedSchemaError
from streams.generated_modules import compiled_functions

__all__ = ["GeneratedReader", "Memo", "MemoEntries", "generate_reader"]


@dataclass(frozen=True, slots=True)
class Memo:
    """The top-level fields ``first`` to ``last`` (in schema order), kept by their bytes.

    At most ``max_entries`` runs of at most ``max_key_bytes`` bytes are kept, of at most
    ``max_widths`` different lengths (each length costs a lookup per record; a run that ends
    the record is looked up once, by the rest of the bytes, whatever its length). ``check``, when
    given, is the bounds check of these fields (``Bounds.checker(..., fields=...)``): it runs
    on a dict holding the run's fields (as decoded, ``enum_values`` applied) when the run is
    parsed, not when it is reused, and a run that breaks it raises
    :class:`InvalidRecordError` and is not kept. A memo may lie inside another (tried when
    the outer run's bytes differ: a per-record field in the outer run does not defeat the
    inner ones); ``last_only`` keeps the last run alone: compared, never looked up.
    ``try_last`` compares the bytes with the run last used before any lookup: cheaper when
    runs repeat (one load's jobs), dearer when two alternate (an execution's STARTED and
    SUCCEEDED results).
    """

    first: str
    last: str
    max_entries: int = 4096
    max_key_bytes: int = 512
    max_widths: int = 8
    check: Check | None = None
    try_last: bool = True
    last_only: bool = False


class MemoEntries:
    """The runs one :class:`Memo` keeps: ``(bytes, width, *values)`` by their bytes."""

    __slots__ = ("by_width", "entries", "last", "memo", "widths")

    def __init__(self, memo: Memo, *, by_width: bool = True) -> None:
        self.memo = memo
        self.by_width = by_width  # False: a run that ends the record, looked up by the rest
        self.entries: dict[bytes, tuple[Any, ...]] = {}
        self.widths: list[int] = []  # the lengths of the kept runs, each tried per record
        # The entry the decoder tries first, in a cell: a decoder storing a global would
        # invalidate its cached lookups of every other global.
        self.last: list[tuple[Any, ...] | None] = [None]

    def clear(self) -> None:
        """Forget every kept run."""
        self.entries.clear()
        self.widths.clear()
        self.last[0] = None

    def remember(self, key: bytes, values: tuple[Any, ...]) -> None:
        """Keep the values ``key`` parsed to, as the entry the decoder tries first."""
        width = len(key)
        entry = (key, width, *values)
        widths = self.widths
        if len(self.entries) >= self.memo.max_entries or (
            self.by_width and width not in widths and len(widths) >= self.memo.max_widths
        ):
            self.entries.clear()  # the records in flight refill it at once
            widths.clear()
        if self.by_width and width not in widths:
            widths.append(width)
        self.entries[key] = entry
        self.last[0] = entry


@dataclass(frozen=True, slots=True)
class GeneratedReader:
    """A compiled decoder: ``read(data)`` decodes the record at the reader's start of ``data``;
    ``from_record(record)`` is what it returns for a record as the codec decodes it."""

    read: Callable[[bytes], Any]
    from_record: Callable[[Mapping[str, Any]], Any]
    source: str
    memos: tuple[MemoEntries, ...]

    def clear(self) -> None:
        """Forget every kept run."""
        for memo in self.memos:
            memo.clear()


def generate_reader(
    schema: Mapping[str, Any],
    *,
    fields: Sequence[str] | None = None,
    memos: Sequence[Memo] = (),
    start: int = 0,
    as_tuple: type[tuple[Any, ...]] | None = None,
    make: Callable[..., Any] | None = None,
    tuple_records: bool = False,
    memo_longs: bool = False,
    raw: Mapping[str, tuple[str, str]] | None = None,
    utf8: Mapping[str, str] | None = None,
    data_as: str | None = None,
    constants: Mapping[str, Any] | None = None,
    enum_values: Mapping[str, Sequence[Any]] | None = None,
    require: Mapping[str, bytes] | None = None,
    canonical: bool = False,
) -> GeneratedReader:
    """The decoder of records of ``schema`` (a record schema as fastavro parses it) whose
    body starts at ``start``.

    It returns the record's dict, or with ``fields`` a tuple of those fields' values in that
    order (an ``as_tuple`` instance, e.g. a NamedTuple, when given), or ``make(*values)`` of
    the fields (or of ``fields``) in order. ``tuple_records``, ``memo_longs``,
    ``enum_values`` and ``canonical`` (with ``raw``: spans equal to their values encoded
    again): see :class:`~streams.avro_source.ValueSource`. Raises
    :class:`UnsupportedSchemaError` for a schema it cannot decode exactly and
    ``ConfigurationError`` for fields or memos that are not the schema's.

    ``fields`` may also name values derived from the bytes (a name here takes precedence
    over a field's): ``raw`` name -> (first, last), the encoded bytes of those top-level
    fields as they are in ``data``; ``utf8`` name -> a string field, its UTF-8 bytes
    (validated); ``data_as``, the whole ``data``; ``constants`` name -> a value. ``require``:
    field -> the one encoding served (an empty array: ``b"\\x00"``); any other raises
    ``ValueError`` (the codec decides). A decoder with derived values or ``enum_values`` has
    no :attr:`GeneratedReader.from_record` (it raises ``ConfigurationError``).
    """
    names = [str(f["name"]) for f in schema["fields"]]
    spans = _spans(names, memos)
    derived = _Derived(
        raw={k: _field_span(names, *v, what=f"raw {k}") for k, v in (raw or {}).items()},
        utf8={k: _field_span(names, v, v, what=f"utf8 {k}").start for k, v in (utf8 or {}).items()},
        data_as=data_as,
        constants=dict(constants or {}),
        require={
            _field_span(names, k, k, what="require").start: bytes(v)
            for k, v in (require or {}).items()
        },
    )
    wanted = names if fields is None else list(fields)
    unknown = set(wanted) - set(names) - derived.names()
    if unknown:
        raise ConfigurationError(f"{schema['name']} has no field {sorted(unknown)}")
    if derived.names() and fields is None:
        raise ConfigurationError("derived values are returned only among fields")
    if make is not None and as_tuple is not None:
        raise ConfigurationError("a decoder builds its values with make or as_tuple, not both")
    source = ValueSource(
        schema.get("__named_schemas", {}),
        tuple_records=tuple_records,
        memo_longs=memo_longs,
        enum_values=enum_values,
        canonical=canonical,
    )
    record = _RecordSource(source, schema, wanted, spans, memos, derived)
    shape = _Shape(fields is not None, as_tuple, make)
    with source.inside(schema):
        record.function(start, shape)
        if derived.names() or enum_values:
            record.no_from_record()
        else:
            record.from_record(shape)
    text = source.text()
    env = source.env
    env.update(_invalid=InvalidRecordError, _new=tuple.__new__, _T=as_tuple, _make=make)
    env.update(_config_error=ConfigurationError)
    states = tuple(
        MemoEntries(memo, by_width=span.stop < len(names))
        for memo, span in zip(memos, spans, strict=True)
    )
    for i, (memo, state) in enumerate(zip(memos, states, strict=True)):
        env.update({f"_last{i}": state.last, f"_state{i}": state, f"_check{i}": memo.check})
        env.update({f"_entries{i}": state.entries, f"_widths{i}": state.widths})
    functions = compiled_functions(text, env)  # the build's, when it compiled this source
    if functions is None:
        try:
            code = compile(text, f"<reader of {schema['name']}>", "exec")
        except (SyntaxError, RecursionError) as exc:  # nested too deep for Python's compiler
            raise UnsupportedSchemaError(f"{schema['name']}: {exc}") from exc
        exec(code, env)
        functions = env
    return GeneratedReader(functions["read"], functions["from_record"], text, states)


@dataclass(frozen=True, slots=True)
class _Derived:
    """The values a decoder returns besides fields (see :func:`generate_reader`), by field
    index: raw spans, UTF-8 bytes of strings, ``data``, constants; and required encodings."""

    raw: dict[str, range]
    utf8: dict[str, int]
    data_as: str | None
    constants: dict[str, Any]
    require: dict[int, bytes]

    def names(self) -> set[str]:
        extra = {self.data_as} if self.data_as is not None else set()
        return {*self.raw, *self.utf8, *self.constants, *extra}


def _field_span(names: list[str], first: str, last: str, *, what: str) -> range:
    if first not in names or last not in names:
        raise ConfigurationError(f"{what}: {first}..{last}: no such field")
    span = range(names.index(first), names.index(last) + 1)
    if not span:
        raise ConfigurationError(f"{what}: {first}..{last} is empty")
    return span


@dataclass(frozen=True, slots=True)
class _Shape:
    """What a decoder returns: the record's dict, or the tuple of the fields asked for (an
    ``as_tuple``), or ``make(*values)``."""

    as_fields: bool
    as_tuple: type | None
    make: Callable[..., Any] | None


def _spans(names: list[str], memos: Sequence[Memo]) -> list[range]:
    """The field indices of each memo, checked to be runs that are disjoint or nested (a
    memo inside another is tried when the outer one's bytes differ)."""
    spans: list[range] = []
    for memo in memos:
        if memo.first not in names or memo.last not in names:
            raise ConfigurationError(f"memo {memo.first}..{memo.last}: no such field")
        span = range(names.index(memo.first), names.index(memo.last) + 1)
        if not span or any(not _nested_or_apart(span, other) or span == other for other in spans):
            raise ConfigurationError(f"memo {memo.first}..{memo.last} is empty or overlaps")
        spans.append(span)
    return spans


def _nested_or_apart(a: range, b: range) -> bool:
    inside = (a.start >= b.start and a.stop <= b.stop) or (b.start >= a.start and b.stop <= a.stop)
    return inside or a.stop <= b.start or b.stop <= a.start


def _within(inner: range, outer: range) -> bool:
    return inner.start >= outer.start and inner.stop <= outer.stop


class _RecordSource:
    """Writes the top-level function: fields outside memos read in place, each memo's run
    reused or read (its nested memos tried inside) and kept, then the output and the
    deferred checks and keeping."""

    def __init__(
        self,
        source: ValueSource,
        schema: Mapping[str, Any],
        wanted: list[str],
        spans: list[range],
        memos: Sequence[Memo],
        derived: _Derived,
    ) -> None:
        self.source = source
        self.fields = list(schema["fields"])
        self.wanted = wanted
        self.spans = spans
        self.memos = memos
        self.derived = derived
        fields = set(wanted) - derived.names()
        self.wanted_fields = fields
        self.dict_out = False  # the output is the record's dict (set by function)
        checked = {i for span, m in zip(spans, memos, strict=True) if m.check for i in span}
        # The local holding each field's value: wanted, or checked with its memo's run; None
        # for fields only checked by their reading.
        self.locals = [
            f"f{i}" if f["name"] in fields or i in checked else None
            for i, f in enumerate(self.fields)
        ]
        for index in derived.require:
            if self.locals[index] is not None:
                raise ConfigurationError(f"required encoding of {self.fields[index]['name']}")
        for name, index in derived.utf8.items():
            if self.source.kind_of(self.fields[index]["type"]) != "string":
                raise ConfigurationError(f"utf8 {name}: {self.fields[index]['name']} not a string")
        self.raw_locals = {name: f"raw{k}" for k, name in enumerate(derived.raw)}
        self.utf8_locals = {name: f"u{k}" for k, name in enumerate(derived.utf8)}
        for name, span in derived.raw.items():
            if not all(_nested_or_apart(span, memo_span) for memo_span in spans):
                raise ConfigurationError(f"raw {name} straddles a memo's run")
        # Each memo's and raw span's owner: the smallest memo around it (None: the record).
        self.parent = [self._owner(span, skip=i) for i, span in enumerate(spans)]
        self.raw_owner = {n: self._owner(span) for n, span in derived.raw.items()}
        self.utf8_owner = {n: self._owner(range(i, i + 1)) for n, i in derived.utf8.items()}

    def _owner(self, span: range, skip: int | None = None) -> int | None:
        around = [i for i, memo in enumerate(self.spans) if i != skip and _within(span, memo)]
        return min(around, key=lambda i: len(self.spans[i]), default=None)

    def function(self, start: int, shape: _Shape) -> None:
        src = self.source
        self.dict_out = not shape.as_fields and shape.make is None
        src.emit("", "def read(data):", "    size = len(data)", f"    pos = {start}")
        self.read_range(0, len(self.fields), "    ", None)
        src.emit("    ", "if pos != size:", "    raise ValueError('bytes left after the record')")
        in_memo = {index for span in self.spans for index in span}
        values = {
            str(f["name"]): (src.fresh(f["type"], name) if index in in_memo else None) or name
            for index, (f, name) in enumerate(zip(self.fields, self.locals, strict=True))
            if name is not None
        }  # values kept by a memo are copied: a caller may change its record's containers
        values.update(self.raw_locals)
        values.update(self.utf8_locals)
        if self.derived.data_as is not None:
            values[self.derived.data_as] = "data"
        for name, value in self.derived.constants.items():
            values[name] = src.constant("value", value)
        src.emit("    ", f"out = {self.output(values, shape)}")
        for i, parent in enumerate(self.parent):
            if parent is None:
                src.emit("    ", f"if start{i} >= 0:")
                self.after_runs(i, "        ", self.check_run)
                self.after_runs(i, "        ", self.keep_run)
        src.emit("    ", "return out")

    def after_runs(self, memo: int, indent: str, write: Callable[[int, str], None]) -> None:
        """Lines for memo ``memo``'s run, freshly parsed, and for each run inside it that was
        parsed too, a nested memo's inside its outer one's: a run reused holds the runs
        inside it, nothing to do for them (their ``start`` is not even set)."""
        write(memo, indent)
        for i, parent in enumerate(self.parent):
            if parent == memo:
                self.source.emit(indent, f"if start{i} >= 0:")
                lines = len(self.source.lines)
                self.after_runs(i, indent + "    ", write)
                if len(self.source.lines) == lines:
                    self.source.lines.pop()  # nothing to do for it: no test either

    def read_range(self, lo: int, hi: int, indent: str, owner: int | None) -> None:
        """The lines reading fields ``lo`` to ``hi`` of the run of memo ``owner`` (None: of
        the record), its nested memos' runs through their memos."""
        src, derived = self.source, self.derived
        raws = [n for n, o in self.raw_owner.items() if o == owner]
        utf8 = {derived.utf8[n]: n for n, o in self.utf8_owner.items() if o == owner}
        children = {
            self.spans[i].start: i for i, parent in enumerate(self.parent) if parent == owner
        }
        bounds = {hi, *children, *utf8, *derived.require}
        for name in raws:
            bounds |= {derived.raw[name].start, derived.raw[name].stop}
        index = lo
        while index < hi:
            for name in raws:
                if derived.raw[name].start == index:
                    src.emit(indent, f"r{self.raw_locals[name]} = pos")
            if index in children:
                child = children[index]
                self.memo_run(child, indent)
                index = self.spans[child].stop
            elif index in derived.require:
                encoding = derived.require[index]
                src.emit(indent, f"if not data.startswith({encoding!r}, pos):")
                src.emit(indent, "    raise ValueError('not the encoding served')")
                src.emit(indent, f"pos += {len(encoding)}")
                index += 1
            elif index in utf8:
                content = self.utf8_locals[utf8[index]]
                src.read_sized(True, self.locals[index], indent, content=content)
                index += 1
            else:
                stop = min(b for b in bounds if b > index)
                last = owner is None and stop == len(self.fields)
                types = [f["type"] for f in self.fields[index:stop]]
                src.read_fields(types, self.locals[index:stop], indent, last=last)
                index = stop
            for name in raws:
                if derived.raw[name].stop == index:
                    local = self.raw_locals[name]
                    src.emit(indent, f"{local} = data[r{local} : pos]")

    def from_record(self, shape: _Shape) -> None:
        """``from_record(r)``: the output for the record ``r`` as the codec decodes it."""
        values = {
            name: self.source.convert(f["type"], f"r[{name!r}]", False)
            for f in self.fields
            if (name := str(f["name"])) in self.wanted
        }
        self.source.emit("", "def from_record(r):", f"    return {self.output(values, shape)}")

    def no_from_record(self) -> None:
        """``from_record`` of a decoder returning derived values: refused."""
        self.source.emit(
            "",
            "def from_record(r):",
            "    raise _config_error('this decoder returns values derived from the bytes')",
        )

    def kept(self, i: int) -> list[str]:
        """The locals a run of memo ``i`` sets: its fields', raw spans' and UTF-8 bytes'."""
        span = self.spans[i]
        # The wanted fields, and those an outer run's check reads (its own runs only when
        # the run is parsed, and then it has them).
        checked: set[int] = set()
        memo = self.parent[i]
        while memo is not None:
            if self.memos[memo].check is not None:
                checked.update(self.spans[memo])
            memo = self.parent[memo]
        kept = [
            name
            for index, name in enumerate(self.locals)
            if index in span
            and name is not None
            and (index in checked or self.fields[index]["name"] in self.wanted_fields)
        ]
        kept += [self.raw_locals[n] for n, s in self.derived.raw.items() if _within(s, span)]
        kept += [self.utf8_locals[n] for n, f in self.derived.utf8.items() if f in span]
        return kept

    def memo_run(self, i: int, indent: str) -> None:
        """The run of memo ``i``: the last entry if the bytes start with it (``try_last``),
        else a kept entry of one of the kept widths, else parsed (``start{i}`` >= 0). A
        ``last_only`` memo has the last entry alone."""
        span, memo, src = self.spans[i], self.memos[i], self.source
        lookup = [
            f"for w in _widths{i}:",
            f"    e = _entries{i}.get(data[pos : pos + w])",
            "    if e is not None:",
            "        break",
            "else:",
            "    e = None",
        ]
        if span.stop == len(self.fields):  # the run ends the record: the rest of the bytes
            lookup = [f"e = _entries{i}.get(data[pos:])"]
            if memo.try_last:
                lookup += ["if e is not None:", f"    _last{i}[0] = e"]
        elif memo.try_last:
            lookup.insert(3, f"        _last{i}[0] = e")
        if self.single(i):
            src.emit(indent, f"e = _last{i}[0]")
            src.emit(indent, "if e is not None and not data.startswith(e[0], pos):")
            src.emit(indent, "    e = None")
        elif memo.try_last:
            src.emit(indent, f"e = _last{i}[0]")
            src.emit(indent, "if e is None or not data.startswith(e[0], pos):")
            src.emit(indent + "    ", *lookup)
        else:
            src.emit(indent, *lookup)
        src.emit(
            indent,
            "if e is not None:",
            f"    {', '.join(['_', 'w', *self.kept(i)])} = e",
            "    pos += w",
            f"    start{i} = -1",
            "else:",
            f"    start{i} = pos",
        )
        self.read_range(span.start, span.stop, indent + "    ", i)
        src.emit(indent, f"    end{i} = pos")

    def single(self, i: int) -> bool:
        return self.memos[i].last_only

    def check_run(self, i: int, indent: str) -> None:
        """After the whole record is read: check a freshly parsed run (its fields as a dict)."""
        if self.memos[i].check is None:
            return
        span = self.spans[i]
        items = ", ".join(f"{self.fields[index]['name']!r}: {self.locals[index]}" for index in span)
        # The record's dict holds the run's fields already: no other dict to build.
        record = "out" if self.dict_out else f"{{{items}}}"
        self.source.emit(indent, f"reason = _check{i}({record})")
        self.source.emit(indent, "if reason is not None:", "    raise _invalid(reason)")

    def keep_run(self, i: int, indent: str) -> None:
        """After every check passed: keep a freshly parsed run."""
        memo = self.memos[i]
        values = "".join(f"{name}, " for name in self.kept(i))
        key = f"data[start{i} : end{i}]"
        self.source.emit(indent, f"if end{i} - start{i} <= {memo.max_key_bytes}:")
        if self.single(i):
            self.source.emit(indent, f"    _last{i}[0] = ({key}, end{i} - start{i}, {values})")
        else:
            self.source.emit(indent, f"    _state{i}.remember({key}, ({values}))")

    def output(self, values: Mapping[str, str], shape: _Shape) -> str:
        """An expression of what the decoder returns, of the wanted fields' ``values`` (an
        expression each, by name)."""
        items = "".join(f"{values[n]}, " for n in self.wanted)
        if shape.make is not None:
            return f"_make({items})"
        if not shape.as_fields:
            return "{" + ", ".join(f"{n!r}: {values[n]}" for n in self.wanted) + "}"
        return f"({items})" if shape.as_tuple is None else f"_new(_T, ({items}))"
