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

__all__ = ["GeneratedReader", "Memo", "MemoEntries", "generate_reader"]


@dataclass(frozen=True, slots=True)
class Memo:
    """The top-level fields ``first`` to ``last`` (in schema order), kept by their bytes.

    At most ``max_entries`` runs of at most ``max_key_bytes`` bytes are kept, of at most
    ``max_widths`` different lengths (each length costs a lookup per record; a run that ends
    the record is looked up once, by the rest of the bytes, whatever its length). ``check``, when
    given, is the bounds check of these fields (``Bounds.checker(..., fields=...)``): it runs
    on what the decoder returns (the dict, or the tuple of ``fields``) when the run is
    parsed, not when it is reused, and a run that breaks it raises
    :class:`InvalidRecordError` and is not kept. ``try_last`` compares the
    bytes with the run last used before any lookup: cheaper when runs repeat (one load's
    jobs), dearer when two alternate (an execution's STARTED and SUCCEEDED results).
    """

    first: str
    last: str
    max_entries: int = 4096
    max_key_bytes: int = 512
    max_widths: int = 8
    check: Check | None = None
    try_last: bool = True


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
) -> GeneratedReader:
    """The decoder of records of ``schema`` (a record schema as fastavro parses it) whose
    body starts at ``start``.

    It returns the record's dict, or with ``fields`` a tuple of those fields' values in that
    order (an ``as_tuple`` instance, e.g. a NamedTuple, when given), or ``make(*values)`` of
    the fields (or of ``fields``) in order. ``tuple_records`` and ``memo_longs``: see
    :class:`~streams.avro_source.ValueSource`. Raises :class:`UnsupportedSchemaError` for a
    schema it cannot decode exactly and ``ConfigurationError`` for fields or memos that are
    not the schema's.
    """
    names = [str(f["name"]) for f in schema["fields"]]
    spans = _spans(names, memos)
    wanted = names if fields is None else list(fields)
    unknown = set(wanted) - set(names)
    if unknown:
        raise ConfigurationError(f"{schema['name']} has no field {sorted(unknown)}")
    if make is not None and as_tuple is not None:
        raise ConfigurationError("a decoder builds its values with make or as_tuple, not both")
    source = ValueSource(
        schema.get("__named_schemas", {}), tuple_records=tuple_records, memo_longs=memo_longs
    )
    record = _RecordSource(source, schema, wanted, spans, memos)
    shape = _Shape(fields is not None, as_tuple, make)
    with source.inside(schema):
        record.function(start, shape)
        record.from_record(shape)
    text = source.text()
    env = source.env
    env.update(_invalid=InvalidRecordError, _new=tuple.__new__, _T=as_tuple, _make=make)
    states = tuple(
        MemoEntries(memo, by_width=span.stop < len(names))
        for memo, span in zip(memos, spans, strict=True)
    )
    for i, (memo, state) in enumerate(zip(memos, states, strict=True)):
        env.update({f"_last{i}": state.last, f"_state{i}": state, f"_check{i}": memo.check})
        env.update({f"_entries{i}": state.entries, f"_widths{i}": state.widths})
    try:
        code = compile(text, f"<reader of {schema['name']}>", "exec")
    except (SyntaxError, RecursionError) as exc:  # nested too deep for Python's compiler
        raise UnsupportedSchemaError(f"{schema['name']}: {exc}") from exc
    exec(code, env)
    return GeneratedReader(env["read"], env["from_record"], text, states)


@dataclass(frozen=True, slots=True)
class _Shape:
    """What a decoder returns: the record's dict, or the tuple of the fields asked for (an
    ``as_tuple``), or ``make(*values)``."""

    as_fields: bool
    as_tuple: type | None
    make: Callable[..., Any] | None


def _spans(names: list[str], memos: Sequence[Memo]) -> list[range]:
    """The field indices of each memo, checked to be runs that do not overlap."""
    spans: list[range] = []
    taken: set[int] = set()
    for memo in memos:
        if memo.first not in names or memo.last not in names:
            raise ConfigurationError(f"memo {memo.first}..{memo.last}: no such field")
        span = range(names.index(memo.first), names.index(memo.last) + 1)
        if not span or taken & set(span):
            raise ConfigurationError(f"memo {memo.first}..{memo.last} is empty or overlaps")
        taken |= set(span)
        spans.append(span)
    return spans


class _RecordSource:
    """Writes the top-level function: fields outside memos read in place, each memo's run
    reused or read and kept, then the output and the deferred checks and keeping."""

    def __init__(
        self,
        source: ValueSource,
        schema: Mapping[str, Any],
        wanted: list[str],
        spans: list[range],
        memos: Sequence[Memo],
    ) -> None:
        self.source = source
        self.fields = list(schema["fields"])
        self.wanted = wanted
        self.spans = spans
        self.memos = memos
        # The local holding each wanted field's value; None for fields only checked.
        self.locals = [f"f{i}" if f["name"] in wanted else None for i, f in enumerate(self.fields)]

    def function(self, start: int, shape: _Shape) -> None:
        src = self.source
        src.emit("", "def read(data):", "    size = len(data)", f"    pos = {start}")
        index = 0
        while index < len(self.fields):
            span = next((s for s in self.spans if s.start == index), None)
            if span is not None:
                self.memo_run(self.spans.index(span), span)
                index = span.stop
                continue
            stop = min([s.start for s in self.spans if s.start > index] + [len(self.fields)])
            types = [f["type"] for f in self.fields[index:stop]]
            last = stop == len(self.fields)
            src.read_fields(types, self.locals[index:stop], "    ", last=last)
            index = stop
        src.emit("    ", "if pos != size:", "    raise ValueError('bytes left after the record')")
        in_memo = {index for span in self.spans for index in span}
        values = {
            str(f["name"]): (src.fresh(f["type"], name) if index in in_memo else None) or name
            for index, (f, name) in enumerate(zip(self.fields, self.locals, strict=True))
            if name is not None
        }  # values kept by a memo are copied: a caller may change its record's containers
        src.emit("    ", f"out = {self.output(values, shape)}")
        for i, span in enumerate(self.spans):
            self.keep_run(i, span)
        src.emit("    ", "return out")

    def from_record(self, shape: _Shape) -> None:
        """``from_record(r)``: the output for the record ``r`` as the codec decodes it."""
        values = {
            name: self.source.convert(f["type"], f"r[{name!r}]", False)
            for f in self.fields
            if (name := str(f["name"])) in self.wanted
        }
        self.source.emit("", "def from_record(r):", f"    return {self.output(values, shape)}")

    def memo_run(self, i: int, span: range) -> None:
        """The run of memo ``i``: the last entry if the bytes start with it (``try_last``),
        else a kept entry of one of the kept widths, else parsed (``start{i}`` >= 0)."""
        kept = [name for name in self.locals[span.start : span.stop] if name is not None]
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
            if self.memos[i].try_last:
                lookup += ["if e is not None:", f"    _last{i}[0] = e"]
        elif self.memos[i].try_last:
            lookup.insert(3, f"        _last{i}[0] = e")
        if self.memos[i].try_last:
            self.source.emit("    ", f"e = _last{i}[0]")
            self.source.emit("    ", "if e is None or not data.startswith(e[0], pos):")
            self.source.emit("        ", *lookup)
        else:
            self.source.emit("    ", *lookup)
        self.source.emit(
            "    ",
            "if e is not None:",
            f"    {', '.join(['_', 'w', *kept])} = e",
            "    pos += w",
            f"    start{i} = -1",
            "else:",
            f"    start{i} = pos",
        )
        types = [f["type"] for f in self.fields[span.start : span.stop]]
        self.source.read_fields(types, self.locals[span.start : span.stop], "        ")
        self.source.emit("        ", f"end{i} = pos")

    def keep_run(self, i: int, span: range) -> None:
        """After the whole record is read: check a freshly parsed run, then keep it."""
        memo = self.memos[i]
        kept = [name for name in self.locals[span.start : span.stop] if name is not None]
        values = "".join(f"{name}, " for name in kept)
        self.source.emit("    ", f"if start{i} >= 0:")
        if memo.check is not None:
            self.source.emit("    ", f"    reason = _check{i}(out)", "    if reason is not None:")
            self.source.emit("    ", "        raise _invalid(reason)")
        self.source.emit(
            "    ",
            f"    if end{i} - start{i} <= {memo.max_key_bytes}:",
            f"        _state{i}.remember(data[start{i} : end{i}], ({values}))",
        )

    def output(self, values: Mapping[str, str], shape: _Shape) -> str:
        """An expression of what the decoder returns, of the wanted fields' ``values`` (an
        expression each, by name)."""
        items = "".join(f"{values[n]}, " for n in self.wanted)
        if shape.make is not None:
            return f"_make({items})"
        if not shape.as_fields:
            return "{" + ", ".join(f"{n!r}: {values[n]}" for n in self.wanted) + "}"
        return f"({items})" if shape.as_tuple is None else f"_new(_T, ({items}))"
