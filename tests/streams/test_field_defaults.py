"""Defaults are written once, in the schemas; every other place reads them from there."""

from __future__ import annotations

import dataclasses

import pytest

from schemas import field_defaults
from services.executor.backoff import RetryPolicy as BackoffPolicy
from services.ingest.settings import DefaultRetry
from streams.records import RetryPolicy


def test_the_retry_policy_defaults_of_every_place_are_the_schemas() -> None:
    schema = field_defaults("kafkron.RetryPolicy")
    assert set(schema) == {
        "max_attempts", "initial_backoff_ms", "multiplier", "max_backoff_ms", "jitter_ratio"
    }  # fmt: skip
    assert RetryPolicy().to_avro() == schema
    assert dataclasses.asdict(BackoffPolicy()) == schema
    ingest = DefaultRetry()
    assert (ingest.max_attempts, ingest.multiplier, ingest.jitter_ratio) == (
        schema["max_attempts"], schema["multiplier"], schema["jitter_ratio"]
    )  # fmt: skip
    assert ingest.initial_backoff_s * 1000 == schema["initial_backoff_ms"]
    assert ingest.max_backoff_s * 1000 == schema["max_backoff_ms"]


def test_defaults_of_nested_and_top_level_records_are_found() -> None:
    assert field_defaults("kafkron.Job")["timeout_ms"] == 300_000
    assert field_defaults("kafkron.CronSchedule")["timezone"] == "UTC"
    with pytest.raises(LookupError, match=r"kafkron\.Nope"):
        field_defaults("kafkron.Nope")
