"""Job request validation: every rejected request names its field (pure, no broker)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from services.ingest.exceptions import JobRequestError
from services.ingest.settings import IngestSettings
from services.ingest.validation import JobCreate, check_limits, parse_job_create
from streams.records import CatchupPolicy, FoldPolicy, OverlapPolicy
from streams.settings import KafkaSettings
from streams.topics import Priority

NOW_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z
FUTURE_ISO = "2027-02-01T10:00:00Z"
FUTURE_MS = 1_801_476_000_000


@pytest.fixture
def settings(tmp_path: Path) -> IngestSettings:
    kafka = KafkaSettings(bootstrap_servers="unused:1", state_dir=tmp_path)
    return IngestSettings(kafka=kafka, max_payload_bytes=1024, run_at_grace_s=60)


def body(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"handler": "reports.nightly", "run_at": FUTURE_ISO}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def errors_of(request: Any, settings: IngestSettings | None = None) -> list[dict[str, Any]]:
    with pytest.raises(JobRequestError) as caught:
        create = parse_job_create(request)
        if settings is not None:
            check_limits(create, settings, NOW_MS)
    errors = caught.value.errors
    json.dumps(errors)  # the API returns them as they are
    return errors


def locs(errors: list[dict[str, Any]]) -> list[list[Any]]:
    return [list(e["loc"]) for e in errors]


def test_one_off_run_at_iso_and_epoch_ms_are_the_same_instant() -> None:
    iso = parse_job_create(body(run_at=FUTURE_ISO))
    epoch = parse_job_create(body(run_at=FUTURE_MS))
    offset = parse_job_create(body(run_at="2027-02-01T11:00:00+01:00"))
    assert iso.run_at == epoch.run_at == offset.run_at == FUTURE_MS


def test_defaults_and_normalisation() -> None:
    create = parse_job_create(
        body(priority="high", overlap="allow", catchup="none", labels={"team": "data"})
    )
    assert create.priority is Priority.HIGH
    assert create.overlap is OverlapPolicy.ALLOW
    assert create.catchup is CatchupPolicy.NONE
    assert create.tenant == "default"
    assert create.timeout_s == 300.0
    assert create.payload_bytes == b""


def test_payload_json_is_stored_as_utf8_json_bytes() -> None:
    create = parse_job_create(body(payload={"to": "zoë", "n": [1, 2.5, None]}))
    assert create.payload_bytes == '{"to":"zoë","n":[1,2.5,null]}'.encode()


def test_payload_b64_is_stored_as_its_bytes() -> None:
    raw = bytes(range(256))
    create = parse_job_create(body(payload_b64=base64.b64encode(raw).decode()))
    assert create.payload_bytes == raw


def test_cron_request_is_validated_and_kept() -> None:
    create = parse_job_create(
        body(
            run_at=None,
            cron={
                "expression": "0 2 * * *",
                "timezone": "Europe/Berlin",
                "start": "2027-01-01T00:00:00Z",
                "fold_policy": "every",
            },
        )
    )
    assert create.cron is not None
    assert create.cron.start == 1_798_761_600_000
    assert create.cron.fold_policy is FoldPolicy.EVERY


def test_dependent_job() -> None:
    create = parse_job_create(body(run_at=None, depends_on=["extract", "load-refs"]))
    assert create.depends_on == ["extract", "load-refs"]


@pytest.mark.parametrize(
    ("request_body", "loc"),
    [
        (body(run_at=None, cron={"expression": "61 * * * *"}), ["cron", "expression"]),
        (body(run_at=None, cron={"expression": "0 2 * *"}), ["cron", "expression"]),
        (body(run_at=None, cron={"expression": "0 0 30 2 *"}), ["cron", "expression"]),
        (
            body(run_at=None, cron={"expression": "0 2 * * *", "timezone": "Mars/Olympus"}),
            ["cron", "timezone"],
        ),
        (
            body(run_at=None, cron={"expression": "0 2 * * *", "timezone": "localtime"}),
            ["cron", "timezone"],
        ),
        (
            body(
                run_at=None,
                cron={"expression": "* * * * *", "start": FUTURE_MS, "end": FUTURE_MS - 1},
            ),
            ["cron", "end"],
        ),
        (
            body(run_at=None, cron={"expression": "* * * * *", "fold_policy": "SOMETIMES"}),
            ["cron", "fold_policy"],
        ),
        (body(run_at="2027-02-01T10:00:00"), ["run_at"]),
        (body(run_at="tomorrow"), ["run_at"]),
        (body(run_at=True), ["run_at"]),
        (body(handler="Reports.Nightly"), ["handler"]),
        (body(handler="reports..nightly"), ["handler"]),
        (body(handler="rm -rf /"), ["handler"]),
        (body(handler="a" * 201), ["handler"]),
        (body(timeout_s=-1), ["timeout_s"]),
        (body(timeout_s=0), ["timeout_s"]),
        (body(timeout_s=1e-9), ["timeout_s"]),  # would round to 0 ms (was a 500)
        (body(run_at=None, depends_on=["up"], dag_wait_s=1e-9), ["dag_wait_s"]),
        (body(jitter_s=-0.5), ["jitter_s"]),
        (body(catchup_window_s=-1), ["catchup_window_s"]),
        (body(retry={"max_attempts": 0}), ["retry", "max_attempts"]),
        (body(retry={"multiplier": 0.5}), ["retry", "multiplier"]),
        (body(retry={"initial_backoff_s": -1}), ["retry", "initial_backoff_s"]),
        (body(priority="URGENT"), ["priority"]),
        (body(overlap="SOMETIMES"), ["overlap"]),
        (body(job_id="a/b"), ["job_id"]),
        (body(job_id="job@123"), ["job_id"]),
        (body(job_id=""), ["job_id"]),
        (body(tenant="a b"), ["tenant"]),
        (body(labels={"bad key": "x"}), ["labels", "bad key", "[key]"]),
        (body(run_at=None, depends_on=[]), ["depends_on"]),
        (body(run_at=None, depends_on=["ok", "not ok"]), ["depends_on", 1]),
        (body(run_at=None, job_id="self", depends_on=["self"]), ["depends_on"]),
        (body(payload_b64="not base64!"), ["payload_b64"]),
        (body(payload={"a": 1}, payload_b64="AA=="), ["payload_b64"]),
        (body(colour="blue"), ["colour"]),
        (body(handler=None), ["handler"]),
    ],
)
def test_each_rejection_names_its_field(request_body: dict[str, Any], loc: list[Any]) -> None:
    assert loc in locs(errors_of(request_body))


def test_more_than_one_schedule_kind_names_the_extra_fields() -> None:
    errors = errors_of(body(cron={"expression": "0 2 * * *"}, depends_on=["up"]))
    assert locs(errors) == [["cron"], ["depends_on"]]
    assert "run_at and cron and depends_on" in errors[0]["msg"]


def test_no_schedule_kind_names_all_three_fields() -> None:
    errors = errors_of(body(run_at=None))
    assert locs(errors) == [[]]
    for name in ("run_at", "cron", "depends_on"):
        assert name in errors[0]["msg"]


def test_not_an_object() -> None:
    assert errors_of([1, 2])[0]["type"] == "model_type"


def test_run_at_in_the_past_beyond_the_grace_window(settings: IngestSettings) -> None:
    errors = errors_of(body(run_at=NOW_MS - 61_000), settings)
    assert locs(errors) == [["run_at"]]
    assert "61 s in the past" in errors[0]["msg"]


def test_run_at_within_the_grace_window_is_accepted(settings: IngestSettings) -> None:
    check_limits(parse_job_create(body(run_at=NOW_MS - 59_000)), settings, NOW_MS)


def test_payload_over_the_limit(settings: IngestSettings) -> None:
    errors = errors_of(body(payload="x" * 1023), settings)  # 1025 bytes with quotes
    assert locs(errors) == [["payload"]]
    assert "1025 bytes" in errors[0]["msg"]
    check_limits(parse_job_create(body(payload="x" * 1022)), settings, NOW_MS)


def test_payload_b64_over_the_limit(settings: IngestSettings) -> None:
    encoded = base64.b64encode(b"\0" * 1025).decode()
    assert locs(errors_of(body(payload_b64=encoded), settings)) == [["payload_b64"]]


def test_cron_end_in_the_past(settings: IngestSettings) -> None:
    request = body(run_at=None, cron={"expression": "* * * * *", "end": NOW_MS - 1})
    assert locs(errors_of(request, settings)) == [["cron", "end"]]


def test_retry_max_backoff_below_initial_with_defaults(settings: IngestSettings) -> None:
    errors = errors_of(body(retry={"initial_backoff_s": 600}), settings)  # default max 300
    assert locs(errors) == [["retry", "max_backoff_s"]]


def test_several_errors_are_all_reported() -> None:
    errors = errors_of(body(handler="BAD", timeout_s=-1, priority="x"))
    assert sorted(locs(errors)) == [["handler"], ["priority"], ["timeout_s"]]


def test_job_create_is_a_model_other_services_can_build() -> None:
    create = JobCreate(handler="a.b", run_at=FUTURE_MS, payload={"k": 1})
    assert create.payload_bytes == b'{"k":1}'
    assert parse_job_create(create) is create
