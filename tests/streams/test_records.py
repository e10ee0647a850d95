"""The pydantic record models agree with the .avsc schemas, field by field, and round-trip.

Models are of the records on topics (``TOPIC_KINDS``); a service's stored state has none
(the timer's TimerState is checked against its schema in ``test_stored_state.py``).
"""

import copy
import enum
import inspect
import json
import re
import types
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

import pytest
from annotated_types import Ge, Le
from pydantic import BaseModel, ValidationError

from schemas import schema_paths
from streams import records
from streams.codec import TOPIC_KINDS, Codec, RecordKind
from streams.records import (
    ATTEMPT_FAILURE_STATUSES,
    FINAL_STATUSES,
    MODEL_BY_KIND,
    AttemptOutcome,
    AvroRecord,
    CronSchedule,
    DagRelease,
    DagSignal,
    DagSignalKind,
    DagVerdict,
    DeadLetter,
    DeadLetterKind,
    DueEvent,
    ExecutionResult,
    ExecutionStatus,
    Job,
    Priority,
    RetryPolicy,
    RetryRequest,
    Trigger,
)

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def current_schemas() -> dict[str, dict[str, Any]]:
    """The highest version of every kind's .avsc, by kind."""
    best: dict[str, tuple[int, dict[str, Any]]] = {}
    for path in schema_paths():
        match = re.fullmatch(r"(\w+)\.v(\d+)\.avsc", path.name)
        assert match, path
        kind, version = match[1], int(match[2])
        if kind not in best or version > best[kind][0]:
            best[kind] = (version, json.loads(path.read_text()))
    return {kind: schema for kind, (_, schema) in best.items()}


def short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def named_types(schema: Any, found: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every record and enum defined in ``schema``, by short name (later ones overwrite)."""
    if isinstance(schema, list):
        for branch in schema:
            named_types(branch, found)
    elif isinstance(schema, dict):
        if schema["type"] in ("record", "enum"):
            found[short(schema["name"])] = schema
        for field in schema.get("fields", []):
            named_types(field["type"], found)
        for key in ("items", "values"):
            if key in schema:
                named_types(schema[key], found)
    return found


# --- one "shape" per type, computed independently from Avro and from Python annotations ---


def avro_shape(avro_type: Any, named: dict[str, dict[str, Any]]) -> Any:
    if isinstance(avro_type, str):
        return avro_type if avro_type in PRIMITIVES else avro_shape(named[short(avro_type)], named)
    if isinstance(avro_type, list):
        if len(avro_type) == 2 and "null" in avro_type:
            (other,) = (t for t in avro_type if t != "null")
            return ("nullable", avro_shape(other, named))
        return ("union", tuple(avro_shape(t, named) for t in avro_type))
    kind = avro_type["type"]
    if kind == "record":
        return ("record", short(avro_type["name"]))
    if kind == "enum":
        return ("enum", short(avro_type["name"]), tuple(avro_type["symbols"]))
    if kind == "array":
        return ("array", avro_shape(avro_type["items"], named))
    if kind == "map":
        return ("map", avro_shape(avro_type["values"], named))
    return avro_shape(kind, named)


def _int_bounds(metadata: list[Any]) -> tuple[Any, Any]:
    low = high = None
    for item in metadata:
        for constraint in getattr(item, "metadata", [item]):
            if isinstance(constraint, Ge):
                low = constraint.ge
            if isinstance(constraint, Le):
                high = constraint.le
    return low, high


def python_shape(annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *metadata = get_args(annotation)
        if base is int:
            bounds = _int_bounds(metadata)
            return {INT32: "int", INT64: "long"}.get(bounds, ("int with bounds", bounds))
        return python_shape(base)
    if origin in (Union, types.UnionType):
        args = get_args(annotation)
        if len(args) == 2 and type(None) in args:
            (other,) = (a for a in args if a is not type(None))
            return ("nullable", python_shape(other))
        return ("union", tuple(python_shape(a) for a in args))
    if origin is list:
        return ("array", python_shape(get_args(annotation)[0]))
    if origin is dict:
        key, value = get_args(annotation)
        return ("map", python_shape(value)) if key is str else ("dict keyed by", key)
    simple = {str: "string", bytes: "bytes", float: "double", bool: "boolean"}
    if annotation in simple:
        return simple[annotation]
    if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
        return ("enum", annotation.__name__, tuple(m.value for m in annotation))
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return ("record", annotation.__name__)
    return ("unmapped python type", repr(annotation))  # e.g. a bare int: no Avro width


def avro_default_as_python(shape: Any, default: Any) -> Any:
    """A JSON default of the .avsc as the Python value it stands for (bytes from code points)."""
    if shape == "bytes":
        return default.encode("latin-1")
    if isinstance(shape, tuple) and shape[0] == "nullable" and default is not None:
        return avro_default_as_python(shape[1], default)
    if isinstance(shape, tuple) and shape[0] == "array":
        return [avro_default_as_python(shape[1], v) for v in default]
    if isinstance(shape, tuple) and shape[0] == "map":
        return {k: avro_default_as_python(shape[1], v) for k, v in default.items()}
    return default


def model_default_as_plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return {k: model_default_as_plain(v) for k, v in value.model_dump().items()}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list):
        return [model_default_as_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: model_default_as_plain(v) for k, v in value.items()}
    return value


def record_mismatches(
    model: type[BaseModel], record: dict[str, Any], named: dict[str, dict[str, Any]]
) -> list[str]:
    """How ``model`` differs from the Avro ``record`` schema; empty when they agree."""
    problems = []
    avro_names = [f["name"] for f in record["fields"]]
    if list(model.model_fields) != avro_names:
        problems.append(f"field names/order: model {list(model.model_fields)} avsc {avro_names}")
    hints = get_type_hints(model, include_extras=True)
    for field in record["fields"]:
        name = field["name"]
        if name not in model.model_fields:
            continue
        info = model.model_fields[name]
        want, got = avro_shape(field["type"], named), python_shape(hints[name])
        if want != got:
            problems.append(f"{name}: avsc type {want}, model type {got}")
        if "default" not in field:
            if not info.is_required():
                problems.append(f"{name}: required in the avsc, has a default in the model")
            continue
        if info.is_required():
            problems.append(f"{name}: has a default in the avsc, required in the model")
            continue
        expected = avro_default_as_python(want, field["default"])
        actual = model_default_as_plain(info.get_default(call_default_factory=True))
        if expected != actual or type(expected) is not type(actual):
            problems.append(f"{name}: avsc default {expected!r}, model default {actual!r}")
    return problems


def enum_mismatches(enum_class: type[enum.Enum], schema: dict[str, Any]) -> list[str]:
    values = [m.value for m in enum_class]
    return [] if values == schema["symbols"] else [f"symbols {values} vs {schema['symbols']}"]


SCHEMAS = {
    kind: schema for kind, schema in current_schemas().items() if RecordKind(kind) in TOPIC_KINDS
}
NAMED_BY_KIND = {kind: named_types(schema, {}) for kind, schema in SCHEMAS.items()}
CASES = [
    pytest.param(kind, name, id=f"{kind}:{name}")
    for kind, named in NAMED_BY_KIND.items()
    for name in named
]


@pytest.mark.parametrize(("kind", "name"), CASES)
def test_model_agrees_with_schema(kind: str, name: str) -> None:
    named = NAMED_BY_KIND[kind]
    python_type = getattr(records, name, None)
    assert python_type is not None, f"streams.records has no model or enum named {name}"
    if named[name]["type"] == "enum":
        assert enum_mismatches(python_type, named[name]) == []
    else:
        assert record_mismatches(python_type, named[name], named) == []


def test_every_model_and_enum_has_a_schema() -> None:
    in_schemas = {name for named in NAMED_BY_KIND.values() for name in named}
    in_module = {
        name
        for name, value in vars(records).items()
        if inspect.isclass(value)
        and value.__module__ in (records.__name__, Priority.__module__)
        and (issubclass(value, enum.Enum) or (issubclass(value, AvroRecord)))
        and value is not AvroRecord
    }
    assert in_module == in_schemas


def test_model_by_kind_names_the_top_level_record_of_each_kind() -> None:
    assert set(MODEL_BY_KIND) == TOPIC_KINDS
    for kind, model in MODEL_BY_KIND.items():
        assert short(SCHEMAS[kind.value]["name"]) == model.__name__


# --- the agreement check itself fails on drift (it is not a tautology) ---

JOB_NAMED = NAMED_BY_KIND["job"]


def _mutated_job(mutate: Any) -> dict[str, Any]:
    schema = copy.deepcopy(SCHEMAS["job"])
    mutate(schema)
    return schema


def _field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in schema["fields"] if f["name"] == name)


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda s: s["fields"].append({"name": "x", "type": "int"}), id="added"),
        pytest.param(lambda s: s["fields"].pop(5), id="removed"),
        pytest.param(lambda s: s["fields"].reverse(), id="reordered"),
        pytest.param(lambda s: _field(s, "version").update(type="int"), id="long->int"),
        pytest.param(lambda s: _field(s, "run_at_ms").update(type="long"), id="not-nullable"),
        pytest.param(lambda s: _field(s, "timeout_ms").update(default=1), id="other-default"),
        pytest.param(lambda s: _field(s, "timeout_ms").pop("default"), id="now-required"),
        pytest.param(lambda s: _field(s, "created_at_ms").update(default=0), id="now-optional"),
        pytest.param(lambda s: _field(s, "payload").update(default="x"), id="bytes-default"),
        pytest.param(lambda s: _field(s, "tenant").update(type="bytes"), id="string->bytes"),
        pytest.param(
            lambda s: _field(s, "retry")["default"].update(max_attempts=4), id="record-default"
        ),
    ],
)
def test_agreement_check_catches_record_drift(mutate: Any) -> None:
    assert record_mismatches(Job, _mutated_job(mutate), JOB_NAMED) != []


def test_agreement_check_catches_enum_drift() -> None:
    schema = copy.deepcopy(JOB_NAMED["OverlapPolicy"])
    schema["symbols"].append("DEFER")
    assert enum_mismatches(records.OverlapPolicy, schema) != []


def test_agreement_check_catches_an_unbounded_int() -> None:
    class Loose(BaseModel):
        version: int

    record = {"type": "record", "name": "Loose", "fields": [{"name": "version", "type": "long"}]}
    assert record_mismatches(Loose, record, {}) != []


# --- behaviour of the models ---

CODEC = Codec.from_directory()
RETRY = RetryPolicy(max_attempts=5, initial_backoff_ms=10, multiplier=3.0, jitter_ratio=0.0)
DUE = DueEvent(
    execution_id="j@1000",
    job_id="j",
    job_version=4,
    scheduled_for_ms=1000,
    fire_at_ms=1003,
    attempt=2,
    handler="reports.nightly",
    payload=b"\xff\x00",
    timeout_ms=5000,
    priority=Priority.HIGH,
    retry=RETRY,
    trigger=Trigger.RETRY,
    emitted_at_ms=1004,
    history=[AttemptOutcome(attempt=1, status=ExecutionStatus.FAILED, error="boom")],
)
MODEL_SAMPLES: dict[RecordKind, AvroRecord] = {
    RecordKind.JOB: Job(
        job_id="j",
        version=4,
        handler="reports.nightly",
        cron=CronSchedule(expression="*/5 * * * *", timezone="Europe/Paris"),
        depends_on=[],  # one schedule kind (bounds.json): the cron
        labels={"k": "v"},
        retry=RETRY,
        created_at_ms=1,
        updated_at_ms=2,
    ),
    RecordKind.DUE_EVENT: DUE,
    RecordKind.EXECUTION_RESULT: ExecutionResult(
        execution_id="j@1000",
        job_id="j",
        scheduled_for_ms=1000,
        status=ExecutionStatus.SKIPPED,
        reason="overlap SKIP: j@940 still running",
        recorded_at_ms=1001,
    ),
    RecordKind.RETRY_REQUEST: RetryRequest(due=DUE, requested_at_ms=1005),
    RecordKind.DEAD_LETTER: DeadLetter(
        kind=DeadLetterKind.UNDECODABLE,
        reason="bad magic",
        source_topic="kafkron.jobs",
        source_partition=0,
        source_offset=17,
        raw_value=b"\x00\x01",
        dead_at_ms=9,
    ),
    RecordKind.DAG_SIGNAL: DagSignal(
        job_id="join",
        kind=DagSignalKind.UPSTREAM_ENDED,
        upstream_job_id="extract",
        dependent_job_id="join",
        run_key_ms=1_700_000_000_000,
        upstream_execution_id="extract@1700000000000",
        upstream_status=ExecutionStatus.SUCCEEDED,
        emitted_at_ms=5,
    ),
    RecordKind.DAG_RELEASE: DagRelease(
        job_id="join",
        run_key_ms=1_700_000_000_000,
        verdict=DagVerdict.RUN,
        upstream_execution_ids=["extract@1700000000000", "load-refs@1700000000000"],
        emitted_at_ms=6,
    ),
}


@pytest.mark.parametrize("kind", sorted(TOPIC_KINDS))
def test_model_round_trips_through_the_codec(kind: RecordKind) -> None:
    model = MODEL_SAMPLES[kind]
    decoded = CODEC.decode(kind, CODEC.encode(kind, model.to_avro()))
    assert decoded == model.to_avro()
    again = MODEL_BY_KIND[kind].from_avro(decoded)
    assert again == model
    assert type(again) is type(model)


def test_from_avro_gives_enums_and_nested_models() -> None:
    decoded = CODEC.decode(RecordKind.DUE_EVENT, CODEC.encode(RecordKind.DUE_EVENT, DUE.to_avro()))
    due = DueEvent.from_avro(decoded)
    assert due.priority is Priority.HIGH
    assert due.history[0].status is ExecutionStatus.FAILED
    assert isinstance(due.retry, RetryPolicy)


def test_model_defaults_equal_the_codecs_defaults() -> None:
    minimal = DueEvent(
        execution_id="j@1",
        job_id="j",
        job_version=1,
        scheduled_for_ms=1,
        fire_at_ms=1,
        attempt=1,
        handler="h",
        timeout_ms=1,
        emitted_at_ms=1,
    )
    required = {
        n: v for n, v in minimal.to_avro().items() if DueEvent.model_fields[n].is_required()
    }
    assert CODEC.decode(RecordKind.DUE_EVENT, CODEC.encode(RecordKind.DUE_EVENT, required)) == (
        minimal.to_avro()
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [("attempt", 2**31), ("attempt", -(2**31) - 1), ("job_version", 2**63)],
)
def test_values_outside_the_avro_int_and_long_ranges_are_rejected(field: str, value: int) -> None:
    with pytest.raises(ValidationError, match=field):
        DueEvent.from_avro(DUE.to_avro() | {field: value})


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(ValidationError, match="jobid"):
        DueEvent.from_avro(DUE.to_avro() | {"jobid": "typo"})


def test_models_are_immutable() -> None:
    with pytest.raises(ValidationError):
        DUE.attempt = 3


def test_final_and_attempt_failure_statuses() -> None:
    assert {s.value for s in FINAL_STATUSES} == {
        "SUCCEEDED",
        "DEAD_LETTER",
        "SKIPPED",
        "MISSED",
        "CANCELLED",
        "UPSTREAM_FAILED",
    }
    assert {s.value for s in ATTEMPT_FAILURE_STATUSES} == {"FAILED", "TIMED_OUT"}
    assert [s for s in ExecutionStatus if s.is_final] == sorted(
        FINAL_STATUSES, key=list(ExecutionStatus).index
    )
    assert not ExecutionStatus.STARTED.is_final
    assert FINAL_STATUSES.isdisjoint(ATTEMPT_FAILURE_STATUSES)
