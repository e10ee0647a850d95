from __future__ import annotations

from services.executor.exceptions import (
    HandlerError,
    HandlerNotFoundError,
    HandlerTimeoutError,
    NonRetryableError,
    RetryableError,
)
from streams.exceptions import KafkronError


def test_retryability_is_an_attribute_of_each_outcome() -> None:
    assert NonRetryableError("bad payload").retryable is False
    assert RetryableError("busy").retryable is True
    assert RetryableError("busy").retry_after_s is None
    assert RetryableError("busy", retry_after_s=2.5).retry_after_s == 2.5
    assert HandlerTimeoutError("late").retryable is True
    assert HandlerNotFoundError("x", []).retryable is False


def test_every_outcome_is_a_handler_error_under_the_one_root() -> None:
    for exc in (
        NonRetryableError("a"),
        RetryableError("b"),
        HandlerTimeoutError("c"),
        HandlerNotFoundError("d", ["e"]),
    ):
        assert isinstance(exc, HandlerError)
        assert isinstance(exc, KafkronError)


def test_not_found_names_the_handler_and_the_registered_ones() -> None:
    exc = HandlerNotFoundError("reports.nightly", ["b.two", "a.one"])
    text = str(exc)
    assert "'reports.nightly'" in text
    assert "a.one, b.two" in text
    assert "kafkron.handlers" in text  # tells the operator what to do next
    assert exc.handler_name == "reports.nightly"


def test_not_found_with_nothing_registered_and_with_many() -> None:
    assert "registered: none" in str(HandlerNotFoundError("x", []))
    many = [f"h{i:03d}" for i in range(25)]
    text = str(HandlerNotFoundError("x", many))
    assert "h019" in text
    assert "h020" not in text
    assert "and 5 more" in text
