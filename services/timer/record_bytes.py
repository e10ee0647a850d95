"""One kind's records as Python objects, in the codec's single-object encoding, fast.

:class:`RecordBytes` writes and reads the records of one kind as the codec does (``C3 01``,
the writer schema's fingerprint, the Avro body) with code generated from the codec's writer
schema (``field_code.py``). Objects carry one attribute per field (nested records as
tuples, see ``field_code.py``) and are built by ``make(*values)``, the values in schema
order: a dataclass declaring the fields in that order (it may add others, with defaults).
The fields after ``memo_after`` are kept by their bytes when decoded (see ``field_code.py``:
records that share them, a herd's, read them once).

Exact or unused: at construction it writes and reads probe records derived from the schema
both ways, through ``make``, and turns itself off (``streams/fast_path.py`` says so) when the
generated code and the codec disagree. Bytes of another fingerprint (a record written under
an older schema), and bytes the generated decoder is not sure of, go to the codec, counted,
which resolves versions and names any problem in its ``DecodeError``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from services.timer.field_code import FieldCode, UnsupportedSchemaError, field_code
from streams.codec import HEADER_LEN, SINGLE_OBJECT_MAGIC, Codec, RecordKind
from streams.exceptions import ConfigurationError
from streams.fast_path import FastPath

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
        self._memo_from = None if memo_after is None else self.names.index(memo_after) + 1
        self._parts: dict[tuple[int, int | None, bool], FieldCode] = {}
        self.code = self.fields(0)
        self.fast = self._agrees_with_the_codec()
        self.fast_path = FastPath(
            f"the generated {kind.value} code (services/timer/record_bytes.py)",
            self.fast,
            "it did not write and read its probe records exactly as the codec does",
        )

    def fields(self, first: int, stop: int | None = None, *, attribute: bool = True) -> FieldCode:
        """The generated code of the writer schema's fields ``first`` to ``stop`` (built once):
        for bytes after :attr:`header`, and only while :attr:`fast`. Its decoder builds
        ``make(**fields)`` of the fields alone; the whole record's builds ``make(*values)``."""
        key = (first, stop, attribute)
        code = self._parts.get(key)
        if code is None:
            whole = first == 0 and stop is None and attribute
            try:
                code = field_code(
                    self.schema,
                    first,
                    stop,
                    attribute=attribute,
                    positional=whole,
                    memo_from=self._memo_from if whole else None,
                )
            except UnsupportedSchemaError as exc:
                raise ConfigurationError(
                    f"schemas/{self.kind.value}.v{self.codec.writer_version(self.kind)}.avsc "
                    f"has a {exc} that services/timer/field_code.py writes no code for: "
                    "extend it there"
                ) from exc
            self._parts[key] = code
        return code

    def encode(self, record: T) -> bytes:
        """``record`` (an attribute per field) as the codec would encode it."""
        if self.fast:
            return self.header + self.code.encode(record)
        return self.codec.encode(self.kind, self.code.to_record(record))

    def decode(self, data: bytes) -> T:
        """The record in ``data``, built by ``make``; raises ``DecodeError`` like the codec."""
        if self.fast and data.startswith(self.header):
            try:
                record: T
                record, end = self.code.decode(data, HEADER_LEN, self.make)
                if end == len(data):
                    return record
            except (IndexError, ValueError):
                pass  # the codec names the problem, or reads what this code is unsure of
        self.fast_path.fell_back()
        result: T = self.code.from_record(self.codec.decode(self.kind, data), self.make)
        return result

    def _agrees_with_the_codec(self) -> bool:
        named: Mapping[str, Any] = self.schema.get("__named_schemas", {})
        for full in (False, True):
            record = {f["name"]: _probe(f["type"], named, full) for f in self.schema["fields"]}
            expected = self.codec.encode(self.kind, record)
            try:
                probe = self.code.from_record(record, self.make)
                written = self.header + self.code.encode(probe)
                read, end = self.code.decode(expected, HEADER_LEN, self.make)
                if self.code.to_record(read) != record or self.code.to_record(probe) != record:
                    return False
            except (IndexError, ValueError, TypeError, KeyError, AttributeError):
                return False
            if written != expected or end != len(expected):
                return False
        return True


def _probe(avro_type: Any, named: Mapping[str, Any], full: bool) -> Any:
    """A value of ``avro_type`` in the codec's form: empty or null, or (``full``) set deep."""
    if isinstance(avro_type, str) and avro_type in named:
        avro_type = named[avro_type]
    if isinstance(avro_type, list):
        other = next(t for t in avro_type if t != "null")
        return _probe(other, named, full) if full else None
    kind = avro_type if isinstance(avro_type, str) else avro_type["type"]
    samples: dict[str, tuple[Any, Any]] = {
        "null": (None, None),
        "boolean": (False, True),
        "long": (0, -(2**40) - 3),
        "string": ("", "é€ x"),
        "bytes": (b"", b"\x00\xff\x80"),
    }
    if kind in samples:
        return samples[kind][full]
    if kind == "enum":
        return avro_type["symbols"][-1 if full else 0]
    if kind == "array":
        items = avro_type["items"]
        return [_probe(items, named, True), _probe(items, named, False)] if full else []
    if kind == "record":
        return {f["name"]: _probe(f["type"], named, full) for f in avro_type["fields"]}
    raise ConfigurationError(f"no probe value for type {kind!r}")
