"""The OpenAPI spec the API serves: valid, true to the code, and fuzzed by schemathesis.

One API for the module (``module_api``: its own topics on the real broker); the spec is the
one it serves at ``/openapi.json``.

schemathesis runs through its Hypothesis strategies (``operation.as_strategy``), not its
pytest plugin: the plugin's ``from_fixture`` sets ``Node._nodeid``, which pytest 9.2 no
longer has. Each operation gets a bounded number of examples; the requests go through the
same in-process client as the other API tests.
"""

from __future__ import annotations

import base64
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from services.ingest.exceptions import JobRequestError
from services.ingest.validation import parse_job_create
from tests.services.ingest.test_ingest_api import Http
from tests.services.ingest.test_ingest_nesting import module_api

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def http(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Http]:
    with module_api(kafka_bootstrap, tmp_path_factory.mktemp("openapi")) as client:
        yield client


@pytest.fixture(scope="module")
def spec(http: Http) -> dict[str, Any]:
    response = http.get("/openapi.json")
    assert response.status_code == 200
    served: dict[str, Any] = response.json()
    return served


# The spec is valid and says what the code does -------------------------------------------


def test_the_served_spec_is_valid_openapi(spec: dict[str, Any]) -> None:
    assert spec["openapi"].startswith("3.1.")
    validate(spec)  # raises naming the first violation


# JSON Schema 2020-12's keywords and OpenAPI 3.1's additions. OpenAPI validators accept any
# other keyword (JSON Schema ignores unknown ones), so a typo or a pydantic-only name like
# ge/le passes them while no tool enforces it.
JSON_SCHEMA_KEYWORDS = frozenset(
    """$schema $id $ref $defs $anchor $dynamicRef $dynamicAnchor $comment $vocabulary
    allOf anyOf oneOf not if then else dependentSchemas prefixItems items contains
    properties patternProperties additionalProperties propertyNames unevaluatedItems
    unevaluatedProperties type enum const multipleOf maximum exclusiveMaximum minimum
    exclusiveMinimum maxLength minLength pattern maxItems minItems uniqueItems maxContains
    minContains maxProperties minProperties required dependentRequired title description
    default deprecated readOnly writeOnly examples format contentEncoding contentMediaType
    contentSchema discriminator xml externalDocs example""".split()  # noqa: SIM905 (a word list)
)
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_VALUES = (
    "items",
    "additionalProperties",
    "not",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)


def keywords_of(schema: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every (keyword, where) used in ``schema`` and the schemas inside it."""
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        yield key, where
        if key in _SCHEMA_MAPS:
            for name, inner in value.items():
                yield from keywords_of(inner, f"{where}.{key}.{name}")
        elif key in _SCHEMA_LISTS:
            for index, inner in enumerate(value):
                yield from keywords_of(inner, f"{where}.{key}[{index}]")
        elif key in _SCHEMA_VALUES:
            yield from keywords_of(value, f"{where}.{key}")


def schemas_of(spec: dict[str, Any]) -> Iterator[tuple[Any, str]]:
    """Every top-level schema of the spec: components, parameters, bodies, responses."""
    for name, schema in spec["components"]["schemas"].items():
        yield schema, name
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            where = f"{method.upper()} {path}"
            for parameter in operation.get("parameters", []):
                yield parameter["schema"], f"{where} {parameter['name']}"
            bodies = [("body", operation.get("requestBody", {}))]
            bodies += list(operation["responses"].items())
            for label, body in bodies:
                for media, content in body.get("content", {}).items():
                    yield content["schema"], f"{where} {label} {media}"


def test_every_schema_keyword_is_json_schema(spec: dict[str, Any]) -> None:
    unknown = {
        (key, where)
        for schema, name in schemas_of(spec)
        for key, where in keywords_of(schema, name)
        if key not in JSON_SCHEMA_KEYWORDS and not key.startswith("x-")
    }
    assert not unknown


def job_create_validator(spec: dict[str, Any]) -> jsonschema.Draft202012Validator:
    root = {"$ref": "#/components/schemas/JobCreate", "components": spec["components"]}
    return jsonschema.Draft202012Validator(root, format_checker=jsonschema.FormatChecker())


def accepted_by_code(body: dict[str, Any]) -> bool:
    try:
        parse_job_create(body)
    except JobRequestError:
        return False
    return True


SCHEDULES = {
    "run_at": "2030-01-01T00:00:00Z",
    "cron": {"expression": "0 2 * * *"},
    "depends_on": ["upstream"],
}
ABSENT = object()
STATES = ["absent", "null", "given"]


@pytest.mark.parametrize("run_at", [ABSENT, None, SCHEDULES["run_at"]], ids=STATES)
@pytest.mark.parametrize("cron", [ABSENT, None, SCHEDULES["cron"]], ids=STATES)
@pytest.mark.parametrize("depends_on", [ABSENT, None, SCHEDULES["depends_on"]], ids=STATES)
def test_the_spec_states_the_one_schedule_rule_the_code_enforces(
    spec: dict[str, Any], run_at: Any, cron: Any, depends_on: Any
) -> None:
    fields = {"run_at": run_at, "cron": cron, "depends_on": depends_on}
    body = {"handler": "a.b", **{k: v for k, v in fields.items() if v is not ABSENT}}
    given_kinds = sum(1 for v in fields.values() if v is not ABSENT and v is not None)
    assert job_create_validator(spec).is_valid(body) is (given_kinds == 1)
    assert accepted_by_code(body) is (given_kinds == 1)


@pytest.mark.parametrize("payload", [ABSENT, None, {"x": 1}], ids=STATES)
@pytest.mark.parametrize("payload_b64", [ABSENT, None, "aGk="], ids=STATES)
def test_the_spec_states_the_one_payload_rule_the_code_enforces(
    spec: dict[str, Any], payload: Any, payload_b64: Any
) -> None:
    fields = {"payload": payload, "payload_b64": payload_b64}
    body = {"handler": "a.b", "run_at": 1_900_000_000_000}
    body.update({k: v for k, v in fields.items() if v is not ABSENT})
    both = payload not in (ABSENT, None) and payload_b64 not in (ABSENT, None)
    assert job_create_validator(spec).is_valid(body) is not both
    assert accepted_by_code(body) is not both


@pytest.mark.parametrize(
    ("run_at", "valid"),
    [
        (0, True),
        (1_900_000_000_000, True),
        (253_402_300_799_999, True),
        (253_402_300_800_000, False),
        (-1, False),
        ("2030-01-01T00:00:00Z", True),
        ("2030-01-01T02:00:00+02:00", True),
        ("2030-01-01t00:00:00.5z", True),  # RFC 3339 allows lower case
        ("2030-01-01T00:00:00", False),  # no zone
        ("tomorrow", False),
        (1.5, False),
    ],
)
def test_run_at_in_the_spec_is_what_the_code_takes(
    spec: dict[str, Any], run_at: Any, valid: bool
) -> None:
    body = {"handler": "a.b", "run_at": run_at}
    assert job_create_validator(spec).is_valid(body) is valid
    assert accepted_by_code(body) is valid


def payload_b64_schema(spec: dict[str, Any]) -> dict[str, Any]:
    strings: list[dict[str, Any]] = [
        s
        for s in spec["components"]["schemas"]["JobCreate"]["properties"]["payload_b64"]["anyOf"]
        if s.get("type") == "string"
    ]
    (string,) = strings
    return string


def test_the_spec_says_payload_b64_is_standard_base64(spec: dict[str, Any]) -> None:
    schema = payload_b64_schema(spec)
    assert (schema["format"], schema["contentEncoding"]) == ("byte", "base64")
    assert re.fullmatch(schema["pattern"], "+/+/") and not re.search(schema["pattern"], "-_-_")


@given(st.binary(max_size=64))
def test_payload_b64_pattern_and_code_agree(raw: bytes) -> None:
    schema = payload_b64_schema(SPEC_FOR_PROPERTIES)
    pattern = re.compile(schema["pattern"])
    body = {"handler": "a.b", "run_at": 1_900_000_000_000}
    standard = base64.b64encode(raw).decode()
    assert pattern.fullmatch(standard)
    assert parse_job_create({**body, "payload_b64": standard}).payload_bytes == raw
    for other in (base64.urlsafe_b64encode(raw).decode(), standard.rstrip("=")):
        if other != standard:  # base64url ('-', '_') or without its padding
            assert not pattern.fullmatch(other)
            assert not accepted_by_code({**body, "payload_b64": other})


SPEC_FOR_PROPERTIES: dict[str, Any] = {}


@pytest.fixture(autouse=True, scope="module")
def _spec_for_properties(spec: dict[str, Any]) -> None:
    """The served spec for @given tests, which cannot take function-scoped fixtures."""
    SPEC_FOR_PROPERTIES.update(spec)


def test_the_api_takes_standard_base64_and_refuses_base64url(http: Http) -> None:
    raw = b"\xfb\xff\xfe>?"  # standard '+/', base64url '-_'
    body = {"handler": "a.b", "run_at": 4_102_444_800_000}
    created = http.post("/api/jobs", json={**body, "payload_b64": base64.b64encode(raw).decode()})
    assert created.status_code == 201, created.text
    stored = http.get(f"/api/jobs/{created.json()['job_id']}").json()
    assert base64.b64decode(stored["payload_b64"]) == raw
    url_safe = base64.urlsafe_b64encode(raw).decode()
    refused = http.post("/api/jobs", json={**body, "payload_b64": url_safe})
    assert refused.status_code == 422
    assert [e["loc"] for e in refused.json()["detail"]] == [["body", "payload_b64"]]


# schemathesis against the live API ------------------------------------------------------

GET, POST, DELETE = "GET", "POST", "DELETE"
# Every operation with requests the spec allows; those with a body or a query also with
# requests it forbids (schemathesis cannot break a free-form path parameter).
OPERATIONS = [
    (POST, "/api/jobs", True),
    (POST, "/api/jobs/batch", True),
    (GET, "/api/jobs/{job_id}", False),
    (POST, "/api/jobs/{job_id}/trigger", False),
    (POST, "/api/jobs/{job_id}/pause", False),
    (POST, "/api/jobs/{job_id}/resume", False),
    (GET, "/api/jobs", True),
    (GET, "/api/jobs/{job_id}/executions", True),
    (GET, "/api/executions/{execution_id}", False),
    (POST, "/api/jobs/{job_id}/backfill", True),
    (DELETE, "/api/jobs/{job_id}", False),  # last: it cancels the jobs the others command
    (GET, "/api/dead-letter", True),
    (POST, "/api/dead-letter/{execution_id}/replay", False),
    (GET, "/api/dag-runs/{root_job_id}/{run_key_ms}", True),
    (GET, "/healthz", False),
    (GET, "/api/dashboard/live", True),
    (GET, "/api/dashboard/partitions", True),
    (GET, "/api/dashboard/jobs/{job_id}/next-fires", True),
]
FUZZED = [
    pytest.param(method, path, mode, id=f"{method} {path} {mode.value}")
    for method, path, negative in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if negative or mode is GenerationMode.POSITIVE
]
# No 5xx; and what is cheap to check of the answer: its status, media type and body schema.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# Per operation and mode: the whole fuzz takes ~20 s here (~2,000 requests).
EXAMPLES = 100


def test_every_operation_is_fuzzed(spec: dict[str, Any]) -> None:
    served = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}
    assert served == {(method, path) for method, path, _ in OPERATIONS}


@pytest.fixture(scope="module")
def job_ids(http: Http) -> list[str]:
    """Jobs for the commands and reads to find (fuzzed ids are unknown: 404)."""
    bodies = [
        {"handler": "fuzz.one_off", "run_at": "2100-01-01T00:00:00Z", "payload": {"n": 1}},
        {"handler": "fuzz.cron", "job_id": KNOWN_UPSTREAM, "cron": {"expression": "0 2 * * *"}},
        {"handler": "fuzz.dag", "depends_on": ["fuzz-upstream"]},
    ]
    answers = [http.post("/api/jobs", json=body) for body in bodies]
    assert [a.status_code for a in answers] == [201] * len(bodies), [a.text for a in answers]
    return [a.json()["job_id"] for a in answers]


KNOWN_UPSTREAM = "fuzz-upstream"


def with_known_upstreams(case: Any) -> Any:
    """``case`` with every ``depends_on`` naming the cron root ``job_ids`` created: a DAG job
    on unknown upstreams is refused (422), and jobs with depends_on are most of what the
    fuzz can write (its cron expressions and run_at instants rarely pass)."""
    body = case.body
    jobs: list[object] = [body] if isinstance(body, dict) else []
    if isinstance(body, dict) and isinstance(body.get("items"), list):
        jobs = [item.get("job") for item in body["items"] if isinstance(item, dict)]
    for job in jobs:
        if isinstance(job, dict) and isinstance(job.get("depends_on"), list):
            job["depends_on"] = [KNOWN_UPSTREAM] * len(job["depends_on"])
    return case


def send(http: Http, case: Any) -> httpx.Response:
    """``case`` sent to the API (schemathesis prepares it as keyword arguments of requests)."""
    kwargs = case.as_transport_kwargs(base_url="http://ingest")
    return http.request(
        kwargs["method"],
        kwargs["url"],
        headers=kwargs.get("headers"),
        params=kwargs.get("params"),
        json=kwargs.get("json"),
        content=kwargs.get("data"),
    )


@pytest.mark.parametrize(("method", "path", "mode"), FUZZED)
def test_schemathesis_finds_no_server_error(
    http: Http,
    spec: dict[str, Any],
    job_ids: list[str],
    method: str,
    path: str,
    mode: GenerationMode,
) -> None:
    operation = schemathesis.openapi.from_dict(spec)[path][method]
    cases = operation.as_strategy(generation_mode=mode)
    if "{job_id}" in path:  # also the ids of jobs that exist
        known = [operation.as_strategy(mode, path_parameters={"job_id": i}) for i in job_ids]
        cases = st.one_of(*known, cases)
    creates = method == POST and path in ("/api/jobs", "/api/jobs/batch")
    if creates and mode is GenerationMode.POSITIVE:
        cases = cases.map(with_known_upstreams)
    if "{root_job_id}" in path:  # also a root and a dependent that exist
        known = [
            operation.as_strategy(mode, path_parameters={"root_job_id": i}) for i in job_ids[1:]
        ]
        cases = st.one_of(*known, cases)
    statuses: Counter[int] = Counter()

    @given(case=cases)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    def check(case: Any) -> None:
        response = send(http, case)
        case.validate_response(response, checks=CHECKS)
        statuses[response.status_code] += 1
        if path == "/api/jobs/batch" and response.status_code == 200:
            answers = response.json()["items"]  # each with what a single create answers
            assert all(a["status_code"] < 500 for a in answers), answers
            statuses.update(a["status_code"] for a in answers)

    check()
    if creates and mode is GenerationMode.POSITIVE:
        assert statuses[201] > 0, statuses  # the fuzz reaches the write path
