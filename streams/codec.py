"""Avro single-object encoding of kafkron's records: bytes on the wire <-> plain dicts.

Every value is ``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint of the writer
schema's parsing canonical form + the schemaless Avro body (Avro spec, "Single-object
encoding"). The fingerprint lets a reader pick the writer schema among every version it
ships, and resolve it to its own current schema, so schemas can evolve.
"""

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from io import BytesIO
from pathlib import Path
from typing import Any, cast

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.schema import fingerprint, to_parsing_canonical_form

from schemas import SCHEMA_DIR, schema_paths
from streams.bounds import BOUNDS_FILE, Bounds, Check
from streams.exceptions import ConfigurationError, DecodeError, EncodeError, InvalidRecordError

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
HEADER_LEN = len(SINGLE_OBJECT_MAGIC) + 8

_FILE_NAME = re.compile(r"^(?P<kind>[a-z_]+)\.v(?P<version>\d+)\.avsc$")

Schema = dict[str, Any]
"""A schema as fastavro parsed it (a record schema, so always a dict)."""


class RecordKind(StrEnum):
    """The kinds of record kafkron writes; each value is the stem of its ``.avsc`` files.

    Every kind travels on a topic but those in :data:`STATE_KINDS`: what a service keeps in
    its own store (and that store's changelog), never a message between services.
    """

    JOB = "job"
    DUE_EVENT = "due_event"
    EXECUTION_RESULT = "execution_result"
    RETRY_REQUEST = "retry_request"
    DEAD_LETTER = "dead_letter"
    TIMER_STATE = "timer_state"
    DAG_SIGNAL = "dag_signal"
    DAG_RELEASE = "dag_release"
    DAG_RUN = "dag_run"


STATE_KINDS: frozenset[RecordKind] = frozenset({RecordKind.TIMER_STATE, RecordKind.DAG_RUN})
"""The kinds that are a service's stored state rather than a topic's records."""
TOPIC_KINDS: frozenset[RecordKind] = frozenset(RecordKind) - STATE_KINDS
"""The kinds of the records on kafkron's topics."""


def schema_fingerprint(schema: Mapping[str, Any]) -> bytes:
    """The 8 bytes single-object encoding writes for ``schema``: its CRC-64-AVRO, little-endian."""
    canonical = to_parsing_canonical_form(dict(schema))
    # fastavro returns the hex of the little-endian bytes, the order the spec writes them in.
    return bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))


@dataclass(frozen=True, slots=True)
class _WriterSchema:
    """What a reader needs to parse the body of one known writer schema."""

    kind: RecordKind
    version: int
    fingerprint: bytes
    schema: Schema
    # The kind's current reader schema, or None when it is this very schema (no resolution).
    reader: Schema | None

    @property
    def label(self) -> str:
        return f"{self.kind.value} v{self.version} (fingerprint {self.fingerprint.hex()})"


@dataclass(frozen=True, slots=True)
class _Writer:
    """Precomputed header and parsed schema used to encode one kind."""

    version: int
    header: bytes
    schema: Schema


class Codec:
    """Encodes and decodes every kind of kafkron record; build it once and share it.

    ``schemas`` maps each kind to its versions (``{version: schema dict}``). Records are
    written with the highest version (or ``writer_versions[kind]``) and decoded into the
    highest version (or ``reader_versions[kind]``); every version stays known, so records
    written by older or newer writers still decode. Immutable, hence safe across threads.

    ``bounds`` are the semantic bounds (``schemas/bounds.json``, see :mod:`streams.bounds`)
    that :meth:`decode` checks every decoded record against; none when not given.
    """

    def __init__(
        self,
        schemas: Mapping[RecordKind, Mapping[int, Mapping[str, Any]]],
        *,
        writer_versions: Mapping[RecordKind, int] | None = None,
        reader_versions: Mapping[RecordKind, int] | None = None,
        bounds: Mapping[str, Any] | None = None,
    ) -> None:
        parsed = {
            _as_kind(kind): {v: _parse(kind, v, s) for v, s in versions.items()}
            for kind, versions in schemas.items()
            if versions
        }
        unknown_pins = (set(writer_versions or {}) | set(reader_versions or {})) - set(parsed)
        if unknown_pins:
            raise ConfigurationError(f"versions pinned for kinds without schemas: {unknown_pins}")
        self._writers: dict[RecordKind, _Writer] = {}
        self._reader_versions: dict[RecordKind, int] = {}
        self._known: dict[bytes, _WriterSchema] = {}
        for kind, versions in parsed.items():
            writer_version = _pick_version(kind, versions, writer_versions, "writer")
            reader_version = _pick_version(kind, versions, reader_versions, "reader")
            self._reader_versions[kind] = reader_version
            self._register(kind, versions, reader_version)
            header = SINGLE_OBJECT_MAGIC + schema_fingerprint(versions[writer_version])
            self._writers[kind] = _Writer(writer_version, header, versions[writer_version])
        self._known_summary = ", ".join(sorted(w.label for w in self._known.values())) or "none"
        readers = {kind: versions[self._reader_versions[kind]] for kind, versions in parsed.items()}
        self.bounds = Bounds(bounds or {}, readers.values())
        self._record_names = {kind: str(schema["name"]) for kind, schema in readers.items()}
        self._checks: dict[RecordKind, Check] = {
            kind: self.bounds.checker(name) for kind, name in self._record_names.items()
        }

    @classmethod
    def from_directory(
        cls,
        directory: Path | None = None,
        *,
        writer_versions: Mapping[RecordKind, int] | None = None,
        reader_versions: Mapping[RecordKind, int] | None = None,
    ) -> "Codec":
        """A codec of every ``<kind>.v<N>.avsc`` in ``directory`` (default: kafkron's schemas),
        with the bounds of its ``bounds.json`` (kafkron's own must have one).

        Every kind must have at least one version, so a packaging mistake fails at start-up.
        """
        paths = schema_paths() if directory is None else sorted(directory.glob("*.avsc"))
        bounds_path = (directory or SCHEMA_DIR) / BOUNDS_FILE
        bounds = None
        if directory is None or bounds_path.exists():
            bounds = _load_json(bounds_path)
        schemas: dict[RecordKind, dict[int, Mapping[str, Any]]] = {}
        for path in paths:
            kind, version = _kind_and_version(path)
            schemas.setdefault(kind, {})[version] = _load_json(path)
        missing = [k.value for k in RecordKind if k not in schemas]
        if missing:
            raise ConfigurationError(
                f"no schema file for {', '.join(missing)} in {directory or 'the schemas package'};"
                " expected files named <kind>.v<N>.avsc (is the package data installed?)"
            )
        try:
            return cls(
                schemas,
                writer_versions=writer_versions,
                reader_versions=reader_versions,
                bounds=bounds,
            )
        except ConfigurationError as exc:
            raise ConfigurationError(f"{bounds_path}: {exc}") from None

    def writer_version(self, kind: RecordKind) -> int:
        """The schema version ``encode`` writes for ``kind``."""
        return self._writer_of(kind).version

    def reader_version(self, kind: RecordKind) -> int:
        """The schema version ``decode`` resolves records of ``kind`` to."""
        self._writer_of(kind)  # the error naming the known kinds
        return self._reader_versions[kind]

    def writer_fingerprint(self, kind: RecordKind) -> bytes:
        """The 8 fingerprint bytes ``encode`` writes for ``kind`` (little-endian CRC-64-AVRO)."""
        return self._writer_of(kind).header[len(SINGLE_OBJECT_MAGIC) :]

    def writer_schema(self, kind: RecordKind) -> Schema:
        """The schema ``encode`` writes ``kind`` with, as fastavro parsed it (do not modify):
        for fast paths derived from it."""
        return self._writer_of(kind).schema

    def encode(self, kind: RecordKind, record: Mapping[str, Any]) -> bytes:
        """``record`` as single-object encoded bytes; fields with a schema default may be left out.

        Raises ``EncodeError`` when the record lacks a required field, has an unknown field,
        or a value of the wrong type.
        """
        writer = self._writer_of(kind)
        buf = BytesIO()
        buf.write(writer.header)
        try:
            # strict_allow_default: an unknown (mistyped) field name fails instead of vanishing.
            schemaless_writer(buf, writer.schema, record, strict_allow_default=True)
        except Exception as exc:  # fastavro raises TypeError, ValueError, OverflowError, ...
            raise EncodeError(
                f"cannot encode a {kind} record with schema v{writer.version}: "
                f"{_describe(exc)}; fix the record to match schemas/{kind}.v"
                f"{writer.version}.avsc"
            ) from exc
        return buf.getvalue()

    def decode(self, kind: RecordKind, data: bytes, *, check: bool = True) -> dict[str, Any]:
        """The record of ``kind`` in ``data``, resolved to the current reader schema.

        Raises ``DecodeError`` (and nothing else) when ``data`` is not such a record, and its
        subclass ``InvalidRecordError`` when the record breaks a bound (unless not ``check``:
        for code that compares decoders, never for a consumer).
        """
        writer = self._writer_schema_of(data)
        if writer.kind != kind:
            raise DecodeError(
                f"expected a {kind} record but the fingerprint is of "
                f"{writer.label}: the record is on the wrong topic or its producer is misrouted"
            )
        record = _read_body(writer, data)
        if check:
            self.check(kind, record)
        return record

    def decode_any(self, data: bytes) -> tuple[RecordKind, dict[str, Any]]:
        """The kind and record in ``data``, whatever its kind; raises only ``DecodeError``."""
        writer = self._writer_schema_of(data)
        record = _read_body(writer, data)
        self.check(writer.kind, record)
        return writer.kind, record

    def check(self, kind: RecordKind, record: Mapping[str, Any]) -> None:
        """Raise ``InvalidRecordError`` when the decoded ``record`` breaks a bound of ``kind``."""
        reason = self._checks[kind](record)
        if reason is not None:
            raise InvalidRecordError(reason)

    def record_name(self, kind: RecordKind) -> str:
        """The full Avro name of ``kind``'s reader schema (``kafkron.Job``), as bounds name it."""
        self._writer_of(kind)  # the error naming the known kinds
        return self._record_names[kind]

    def _writer_of(self, kind: RecordKind) -> _Writer:
        try:
            return self._writers[kind]
        except KeyError:
            raise EncodeError(
                f"this codec has no schema for kind {kind!r}; it knows {self._known_summary}"
            ) from None

    def _writer_schema_of(self, data: bytes) -> _WriterSchema:
        if not data or len(data) < HEADER_LEN:
            raise DecodeError(
                f"value of {len(data or b'')} bytes is shorter than the {HEADER_LEN}-byte Avro"
                " single-object header: empty, a tombstone, or not written by a kafkron codec"
            )
        if data[:2] != SINGLE_OBJECT_MAGIC:
            raise DecodeError(
                f"bad magic {bytes(data[:2]).hex()} (value starts {bytes(data[:16]).hex()}), "
                f"expected {SINGLE_OBJECT_MAGIC.hex()}: not an Avro single-object record "
                "(JSON, Confluent wire format, or a foreign producer on this topic?)"
            )
        fingerprint_bytes = bytes(data[2:HEADER_LEN])
        writer = self._known.get(fingerprint_bytes)
        if writer is None:
            raise DecodeError(
                f"unknown writer schema fingerprint {fingerprint_bytes.hex()}; known: "
                f"{self._known_summary}. A newer writer may use a schema this process lacks: "
                "deploy the new schemas/*.avsc to every reader before any writer uses it"
            )
        return writer

    def _register(
        self, kind: RecordKind, versions: Mapping[int, Schema], reader_version: int
    ) -> None:
        reader = versions[reader_version]
        reader_fingerprint = schema_fingerprint(reader)
        for version, schema in sorted(versions.items()):
            fp = schema_fingerprint(schema)
            clash = self._known.get(fp)
            if clash is not None and clash.kind != kind:
                raise ConfigurationError(
                    f"{kind.value} v{version} has the same fingerprint as {clash.label}; "
                    "give the two records different names"
                )
            if clash is None:
                resolve_to = None if fp == reader_fingerprint else reader
                self._known[fp] = _WriterSchema(kind, version, fp, schema, resolve_to)


def _read_body(writer: _WriterSchema, data: bytes) -> dict[str, Any]:
    """Parse the body after the header, with schema resolution when the writer is not current."""
    buf = BytesIO(data)
    buf.seek(HEADER_LEN)
    try:
        record = schemaless_reader(buf, writer.schema, writer.reader)
    except SchemaResolutionError as exc:
        raise DecodeError(
            f"{writer.label} cannot be resolved to this reader's schema ({exc}): an incompatible"
            " schema change, e.g. a new enum symbol where the enum has no default"
        ) from exc
    except Exception as exc:  # fastavro raises EOFError, IndexError, UnicodeDecodeError, ...
        raise DecodeError(
            f"{writer.label} body of {len(data) - HEADER_LEN} bytes does not parse "
            f"({_describe(exc)}): truncated or corrupt record"
        ) from exc
    if buf.tell() != len(data):
        raise DecodeError(
            f"{writer.label} body parsed but {len(data) - buf.tell()} bytes remain: corrupt, or "
            "written with another schema than its fingerprint names"
        )
    if writer.reader is not None:
        # fastavro fills fields the writer lacked with the reader schema's default objects
        # themselves; copy so that a caller mutating its record cannot change later records.
        record = fresh_copy(record)
    return cast(dict[str, Any], record)


def _describe(exc: Exception) -> str:
    """``Type: message``, or just the type when fastavro gave no message (bare EOFError)."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def fresh_copy(value: Any) -> Any:
    """A copy of a decoded value sharing no dict or list with it (cheaper than deepcopy)."""
    if isinstance(value, dict):
        return {k: fresh_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [fresh_copy(v) for v in value]
    return value


def _pick_version(
    kind: RecordKind,
    versions: Mapping[int, Schema],
    pins: Mapping[RecordKind, int] | None,
    role: str,
) -> int:
    version = max(versions) if pins is None or kind not in pins else pins[kind]
    if version not in versions:
        raise ConfigurationError(
            f"{role} version {version} of {kind.value} is pinned but only versions "
            f"{sorted(versions)} exist"
        )
    return version


def _parse(kind: RecordKind, version: int, schema: Mapping[str, Any]) -> Schema:
    """Parse one schema (on a copy) and make its defaults usable as decoded values."""
    try:
        parsed = parse_schema(copy.deepcopy(dict(schema)))
    except Exception as exc:  # SchemaParseException, UnknownType, ValueError, ...
        raise ConfigurationError(f"schema {kind}.v{version} is invalid: {exc}") from exc
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise ConfigurationError(f"schema {kind}.v{version} must be a record schema")
    named: dict[str, Any] = parsed.get("__named_schemas", {})
    for field_owner in [parsed, *named.values()]:
        _decode_defaults(field_owner, named)
    return parsed


def _decode_defaults(schema: Any, named: Mapping[str, Any]) -> None:
    """Turn JSON defaults of ``bytes`` fields into bytes, in place, as a decoder returns them.

    fastavro hands a reader schema's defaults out verbatim (``""`` for an absent bytes field)
    and cannot write them either; converted once here, both work.
    """
    if isinstance(schema, dict) and schema.get("type") in ("record", "error"):
        for field in schema["fields"]:
            if "default" in field:
                field["default"] = _default_value(field["type"], field["default"], named)


def _default_value(avro_type: Any, default: Any, named: Mapping[str, Any]) -> Any:
    """One JSON default as the decoded Python value of ``avro_type`` (Avro spec defaults table)."""
    if isinstance(avro_type, str) and avro_type in named:
        avro_type = named[avro_type]
    if isinstance(avro_type, list):  # a union's default is of its first branch
        return _default_value(avro_type[0], default, named) if avro_type else default
    type_name = avro_type.get("type") if isinstance(avro_type, dict) else avro_type
    if type_name in ("bytes", "fixed") and isinstance(default, str):
        return default.encode("latin-1")  # code points 0-255 are the bytes, per the spec
    if type_name in ("record", "error") and isinstance(default, dict):
        types = {f["name"]: f["type"] for f in avro_type["fields"]}
        return {k: _default_value(types.get(k), v, named) for k, v in default.items()}
    if type_name == "array" and isinstance(default, list):
        return [_default_value(avro_type["items"], v, named) for v in default]
    if type_name == "map" and isinstance(default, dict):
        return {k: _default_value(avro_type["values"], v, named) for k, v in default.items()}
    return default


def _as_kind(kind: str) -> RecordKind:
    try:
        return RecordKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in RecordKind)
        raise ConfigurationError(f"unknown record kind {kind!r}; known kinds: {known}") from None


def _kind_and_version(path: Path) -> tuple[RecordKind, int]:
    match = _FILE_NAME.match(path.name)
    if match is None:
        raise ConfigurationError(f"schema file {path} is not named <kind>.v<N>.avsc")
    try:
        return _as_kind(match["kind"]), int(match["version"])
    except ConfigurationError as exc:
        raise ConfigurationError(f"schema file {path}: {exc}") from None


def _load_json(path: Path) -> Mapping[str, Any]:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read schema file {path}: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigurationError(f"schema file {path} must hold one JSON object")
    return loaded
