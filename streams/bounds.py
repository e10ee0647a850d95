"""Semantic bounds of kafkron's records: declared in ``schemas/bounds.json``, checked at decode.

The ``.avsc`` files give a record's shape; ``bounds.json`` beside them gives what a value
must also be for kafkron to act on it (ids non-empty and short enough, an attempt of at least
1, versions not negative, times within years 1970-9999, exactly one schedule kind, a key
equal to the job id). A decoded record that breaks one is unusable input: consumers
dead-letter it with the reason, so nothing downstream of decode needs a guard of its own.

:class:`Bounds` reads the declarations against the schemas (a bound on a field that does not
exist, or that does not fit the field's type, is a :class:`ConfigurationError` at start-up)
and derives one check function per named record from them, as Python source compiled once:
a check is a handful of comparisons, cheap enough for the hot paths. A check returns None
for a good record and the reason for a bad one (``Codec.check`` raises ``InvalidRecordError``
with it). Checks of a subset of the fields, read as attributes, serve the views that the hot
paths decode into (``checker(..., fields=..., attribute=True)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from streams.exceptions import ConfigurationError

BOUNDS_FILE = "bounds.json"

Check = Callable[[Any], "str | None"]
"""A record (or a view of one) -> None when it keeps its bounds, else the reason."""

_NUMBER_TYPES = frozenset({"int", "long", "float", "double"})
_SIZED_TYPES = frozenset({"string", "bytes"})
_COUNTED_TYPES = frozenset({"array", "map"})
_BOUND_KEYS = {
    "min": _NUMBER_TYPES,
    "max": _NUMBER_TYPES,
    "min_bytes": _SIZED_TYPES,
    "max_bytes": _SIZED_TYPES,
    "max_items": _COUNTED_TYPES,
}


@dataclass(frozen=True, slots=True)
class _Field:
    """One field of a record schema, reduced to what a check needs."""

    name: str
    type_name: str  # a primitive, "record", "array", "map", "enum" or "fixed"
    nullable: bool
    record: str | None  # the full name of a record type (the field's, or its array items')
    bound: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class _RecordBounds:
    """The declared bounds of one named record, resolved against its schema."""

    name: str
    fields: tuple[_Field, ...]
    exactly_one: tuple[tuple[str, ...], ...]
    key: tuple[str, ...] | None


class Bounds:
    """The checks of every named record in ``schemas`` (parsed by fastavro), per ``declarations``
    (the JSON of ``bounds.json``). Immutable once built, hence safe across threads."""

    def __init__(
        self, declarations: Mapping[str, Any], schemas: Iterable[Mapping[str, Any]]
    ) -> None:
        named: dict[str, Mapping[str, Any]] = {}
        for schema in schemas:
            for name, definition in schema.get("__named_schemas", {}).items():
                named.setdefault(name, definition)
        self._records = _resolve(declarations, named)
        self._checks: dict[tuple[str, frozenset[str] | None, bool], Check] = {}

    def checker(
        self, record_name: str, *, fields: Iterable[str] | None = None, attribute: bool = False
    ) -> Check:
        """The check of ``record_name`` (a full name, ``kafkron.Job``), built once.

        ``fields`` limits it to those fields (a record-level rule is kept only when all its
        fields are among them); ``attribute`` reads them as attributes of a view instead of
        items of a dict. A record without declared bounds gets a check that passes all.
        """
        subset = None if fields is None else frozenset(fields)
        cache_key = (record_name, subset, attribute)
        check = self._checks.get(cache_key)
        if check is None:
            check = self._checks[cache_key] = self._compile(record_name, subset, attribute)
        return check

    def field_bound(self, record_name: str, field: str) -> Mapping[str, float]:
        """The bound declared for one field (empty when none), e.g. for a reader that checks
        raw bytes: a long whose only bound is ``min`` 0 is out of bounds exactly when its
        zig-zag varint's first byte is odd."""
        bounds = self._records.get(record_name)
        for candidate in () if bounds is None else bounds.fields:
            if candidate.name == field:
                return candidate.bound
        return {}

    def key_path(self, record_name: str) -> tuple[str, ...] | None:
        """The field path the Kafka key of such a record must equal, if declared."""
        bounds = self._records.get(record_name)
        return None if bounds is None else bounds.key

    def key_reason(
        self, record_name: str, key: bytes | None, record: Mapping[str, Any]
    ) -> str | None:
        """None when ``key`` is what ``record``'s declared key field says, else the reason."""
        path = self.key_path(record_name)
        if path is None:
            return None
        value: Any = record
        for name in path:
            value = value[name]
        if key is None:
            return f"record has no key; a {_short(record_name)} is keyed by its {'.'.join(path)}"
        if key != value.encode():
            shown = key[:80]
            return (
                f"record key {shown!r} is not its {'.'.join(path)} {value[:80]!r}; producers must "
                "key every record by job id so that a job's records share one partition"
            )
        return None

    def _compile(self, record_name: str, subset: frozenset[str] | None, attribute: bool) -> Check:
        lines: list[str] = []
        env: dict[str, Any] = {"_isnan": math.isnan}
        _emit_record(self._records, record_name, "r", subset, attribute, lines, env, "    ", 0)
        source = "def check(r):\n" + "\n".join(lines) + "\n    return None\n"
        exec(compile(source, f"<bounds of {record_name}>", "exec"), env)
        check: Check = env["check"]
        return check


def _emit_record(
    records: Mapping[str, _RecordBounds],
    record_name: str,
    var: str,
    subset: frozenset[str] | None,
    attribute: bool,
    lines: list[str],
    env: dict[str, Any],
    indent: str,
    depth: int,
) -> None:
    """Append the checks of one record held in ``var`` to ``lines`` (nested records inline)."""
    bounds = records.get(record_name)
    if bounds is None:
        return
    label = _short(record_name)
    for field in bounds.fields:
        if subset is not None and field.name not in subset:
            continue
        value = f"v{depth}"
        access = f"{var}.{field.name}" if attribute else f"{var}[{field.name!r}]"
        body: list[str] = []
        _emit_field(records, label, field, value, body, env, depth)
        if not body:
            continue
        lines.append(f"{indent}{value} = {access}")
        if field.nullable:
            lines.append(f"{indent}if {value} is not None:")
            lines.extend(f"{indent}    {line}" for line in body)
        else:
            lines.extend(f"{indent}{line}" for line in body)
    for group in bounds.exactly_one:
        if subset is not None and not subset.issuperset(group):
            continue
        terms = []
        for name in group:
            access = f"{var}.{name}" if attribute else f"{var}[{name!r}]"
            terms.append(f"({access} is not None and {access} != [])")
        reason = f"{label} must have exactly one of {', '.join(group)}"
        env_name = f"_reason_{len(env)}"
        env[env_name] = reason
        lines.append(f"{indent}if sum(({', '.join(terms)},)) != 1:")
        lines.append(f"{indent}    return {env_name} + _which({var}, {group!r}, {attribute})")
        env["_which"] = _which


def _emit_field(
    records: Mapping[str, _RecordBounds],
    label: str,
    field: _Field,
    value: str,
    body: list[str],
    env: dict[str, Any],
    depth: int,
) -> None:
    """The lines that check ``value`` (one field's value, not None) against its bound."""
    where = f"{label}.{field.name}"
    bound = field.bound
    if field.type_name in _NUMBER_TYPES and ("min" in bound or "max" in bound):
        low, high = bound.get("min"), bound.get("max")
        test = " <= ".join(
            part
            for part in (
                repr(low) if low is not None else "",
                value,
                repr(high) if high is not None else "",
            )
            if part
        )
        env["_out_of_range"] = _out_of_range
        body.append(f"if not ({test}):")
        body.append(f"    return _out_of_range({where!r}, {value}, {low!r}, {high!r})")
    if field.type_name in _SIZED_TYPES:
        env["_bad_size"] = _bad_size
        low_bytes, high_bytes = bound.get("min_bytes"), bound.get("max_bytes")
        if low_bytes is not None and low_bytes > 0:
            body.append(f"if len({value}) < {int(low_bytes)}:")
            body.append(f"    return _bad_size({where!r}, {value}, {low_bytes!r}, {high_bytes!r})")
        if high_bytes is not None:
            # A str of n characters has at most 4n UTF-8 bytes: most need no encode.
            size = f"len({value}.encode())" if field.type_name == "string" else f"len({value})"
            body.append(f"if len({value}) > {int(high_bytes) // 4} and {size} > {int(high_bytes)}:")
            body.append(f"    return _bad_size({where!r}, {value}, {low_bytes!r}, {high_bytes!r})")
    if field.type_name in _COUNTED_TYPES and "max_items" in bound:
        most = int(bound["max_items"])
        env["_too_many"] = _too_many
        body.append(f"if len({value}) > {most}:")
        body.append(f"    return _too_many({where!r}, len({value}), {most})")
    if field.record is not None and field.record in records:
        nested: list[str] = []
        if field.type_name == "array":
            item = f"i{depth}"
            _emit_record(records, field.record, item, None, False, nested, env, "    ", depth + 1)
            if nested:
                body.append(f"for {item} in {value}:")
        else:
            _emit_record(records, field.record, value, None, False, nested, env, "", depth + 1)
        body.extend(nested)


def _out_of_range(where: str, value: Any, low: float | None, high: float | None) -> str:
    if isinstance(value, float) and math.isnan(value):
        return f"{where} is NaN"
    if low is not None and value < low:
        return f"{where} is {value}, below its minimum {low}"
    return f"{where} is {value}, above its maximum {high}"


def _bad_size(where: str, value: str | bytes, low: float | None, high: float | None) -> str:
    size = len(value.encode()) if isinstance(value, str) else len(value)
    if size == 0:
        return f"{where} is empty"
    if low is not None and size < low:
        return f"{where} has {size} bytes, fewer than its minimum {int(low)}"
    return f"{where} has {size} bytes, more than its maximum {int(high or 0)}"


def _too_many(where: str, count: int, most: int) -> str:
    return f"{where} has {count} items, more than its maximum {most}"


def _which(record: Any, group: tuple[str, ...], attribute: bool) -> str:
    values = {n: getattr(record, n) if attribute else record[n] for n in group}
    given = [n for n, v in values.items() if v is not None and v != []]
    return f" (it has {', '.join(given)})" if given else " (it has none)"


def _short(record_name: str) -> str:
    return record_name.rpartition(".")[2]


def _resolve(
    declarations: Mapping[str, Any], named: Mapping[str, Mapping[str, Any]]
) -> dict[str, _RecordBounds]:
    """Every declared record's bounds, checked against its schema."""
    unknown = set(declarations) - {"doc", "named_bounds", "records"}
    if unknown:
        raise ConfigurationError(f"unknown top-level keys {sorted(unknown)}")
    named_bounds: Mapping[str, Any] = declarations.get("named_bounds", {})
    for name, bound in named_bounds.items():
        _check_bound_keys(f"named bound {name!r}", bound)
    resolved: dict[str, _RecordBounds] = {}
    for record_name, spec in declarations.get("records", {}).items():
        schema = named.get(record_name)
        if schema is None or schema.get("type") != "record":
            known = ", ".join(sorted(n for n, s in named.items() if s.get("type") == "record"))
            raise ConfigurationError(
                f"bounds for {record_name}, which no schema defines; known: {known}"
            )
        resolved[record_name] = _resolve_record(record_name, spec, schema, named_bounds, named)
    for record_name, schema in named.items():
        if schema.get("type") == "record" and record_name not in resolved:
            resolved[record_name] = _resolve_record(record_name, {}, schema, named_bounds, named)
    return resolved


def _resolve_record(
    record_name: str,
    spec: Mapping[str, Any],
    schema: Mapping[str, Any],
    named_bounds: Mapping[str, Any],
    named: Mapping[str, Mapping[str, Any]],
) -> _RecordBounds:
    unknown = set(spec) - {"fields", "exactly_one", "key"}
    if unknown:
        raise ConfigurationError(f"{record_name}: unknown keys {sorted(unknown)}")
    declared: Mapping[str, Any] = spec.get("fields", {})
    schema_fields = {f["name"]: f for f in schema["fields"]}
    missing = set(declared) - set(schema_fields)
    if missing:
        raise ConfigurationError(f"{record_name} has no field {sorted(missing)}")
    fields = []
    for name, avro_field in schema_fields.items():
        bound = declared.get(name, {})
        if isinstance(bound, str):
            if bound not in named_bounds:
                raise ConfigurationError(f"{record_name}.{name}: no named bound {bound!r}")
            bound = named_bounds[bound]
        type_name, nullable, record = _type_of(avro_field["type"], named)
        _check_bound_keys(f"{record_name}.{name}", bound, type_name)
        fields.append(_Field(name, type_name, nullable, record, bound))
    exactly_one = tuple(tuple(group) for group in spec.get("exactly_one", []))
    for group in exactly_one:
        if not set(group) <= set(schema_fields):
            raise ConfigurationError(f"{record_name}: exactly_one names unknown fields {group}")
    key = tuple(spec["key"].split(".")) if "key" in spec else None
    if key is not None:
        _check_key_path(record_name, key, schema, named)
    return _RecordBounds(record_name, tuple(fields), exactly_one, key)


def _type_of(
    avro_type: Any, named: Mapping[str, Mapping[str, Any]]
) -> tuple[str, bool, str | None]:
    """(type name, nullable, full name of the record it holds or its items are)."""
    nullable = False
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        nullable = len(branches) < len(avro_type)
        if len(branches) != 1:
            return "union", nullable, None
        avro_type = branches[0]
    if isinstance(avro_type, str) and avro_type in named:
        avro_type = named[avro_type]
    if isinstance(avro_type, str):
        return avro_type, nullable, None
    type_name = avro_type["type"]
    if type_name == "record":
        return "record", nullable, avro_type["name"]
    if type_name == "array":
        _, _, items = _type_of(avro_type["items"], named)
        return "array", nullable, items
    return type_name, nullable, None


def _check_bound_keys(where: str, bound: Any, type_name: str | None = None) -> None:
    if not isinstance(bound, Mapping):
        raise ConfigurationError(f"{where}: a bound is an object or a named bound's name")
    for key, value in bound.items():
        if key not in _BOUND_KEYS:
            raise ConfigurationError(
                f"{where}: unknown bound {key!r}; known: {sorted(_BOUND_KEYS)}"
            )
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ConfigurationError(f"{where}: bound {key!r} must be a number")
        if type_name is not None and type_name not in _BOUND_KEYS[key]:
            raise ConfigurationError(f"{where}: bound {key!r} does not apply to type {type_name}")


def _check_key_path(
    record_name: str,
    path: tuple[str, ...],
    schema: Mapping[str, Any],
    named: Mapping[str, Mapping[str, Any]],
) -> None:
    current: Mapping[str, Any] = schema
    for i, name in enumerate(path):
        fields = {f["name"]: f for f in current["fields"]}
        if name not in fields:
            raise ConfigurationError(f"{record_name}: key {'.'.join(path)} names no field")
        type_name, nullable, record = _type_of(fields[name]["type"], named)
        last = i == len(path) - 1
        if last and (type_name != "string" or nullable):
            raise ConfigurationError(f"{record_name}: key {'.'.join(path)} is not a string field")
        if not last:
            if type_name != "record" or record is None or nullable:
                raise ConfigurationError(
                    f"{record_name}: key {'.'.join(path)} goes through a non-record"
                )
            current = named[record]
