from __future__ import annotations

import statistics

from hypothesis import given
from hypothesis import strategies as st

from services.executor.backoff import (
    RetryPolicy,
    base_delay_ms,
    jitter_unit,
    retry_delay_ms,
    should_retry,
)

NO_JITTER = RetryPolicy(
    initial_backoff_ms=1000, multiplier=2.0, max_backoff_ms=10_000, jitter_ratio=0
)

policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(1, 20),
    initial_backoff_ms=st.integers(0, 10**7),
    multiplier=st.floats(0.0, 1000.0),
    max_backoff_ms=st.integers(0, 10**9),
    jitter_ratio=st.floats(0.0, 1.0),
)


def test_exponential_and_capped_without_jitter() -> None:
    delays = [retry_delay_ms(NO_JITTER, attempt, "j@1") for attempt in range(1, 7)]
    assert delays == [1000, 2000, 4000, 8000, 10_000, 10_000]


def test_jitter_is_deterministic_and_fixed_across_processes() -> None:
    policy = RetryPolicy(jitter_ratio=0.5)
    first = retry_delay_ms(policy, 3, "job-1@1700000000000")
    assert first == retry_delay_ms(policy, 3, "job-1@1700000000000")
    # A golden value: blake2b, not hash(), so every executor (any PYTHONHASHSEED) agrees.
    # blake2b(b"job-1@1700000000000\x003", digest_size=8, person=b"kafkron-backoff")
    # = 4d95891ca35b2da7, so the unit is 0x4d95891ca35b2da7 / 2**63 - 1.
    assert jitter_unit("job-1@1700000000000", 3) == 0x4D95891CA35B2DA7 / 2**63 - 1
    assert first == round(4000 * (1 + 0.5 * (0x4D95891CA35B2DA7 / 2**63 - 1))) == 3212


def test_jitter_differs_by_execution_and_attempt_and_centres_on_the_base() -> None:
    policy = RetryPolicy(initial_backoff_ms=10_000, jitter_ratio=0.2)
    delays = [retry_delay_ms(policy, 1, f"job@{i}") for i in range(2000)]
    assert len(set(delays)) > 1000
    assert min(delays) >= 8000
    assert max(delays) <= 12_000
    assert abs(statistics.mean(delays) - 10_000) < 150
    assert jitter_unit("job@1", 1) != jitter_unit("job@1", 2)


@given(policy=policies, attempt=st.integers(1, 10_000), execution_id=st.text(max_size=40))
def test_delay_stays_within_jitter_of_the_capped_base(
    policy: RetryPolicy, attempt: int, execution_id: str
) -> None:
    base = min(
        float(policy.max_backoff_ms),
        base_delay_ms(policy, attempt),
    )
    delay = retry_delay_ms(policy, attempt, execution_id)
    assert base * (1 - policy.jitter_ratio) - 1 <= delay <= base * (1 + policy.jitter_ratio) + 1
    assert delay >= 0


def test_huge_attempts_and_multipliers_hit_the_cap_instead_of_overflowing() -> None:
    policy = RetryPolicy(multiplier=1e300, max_backoff_ms=5000, jitter_ratio=0)
    assert retry_delay_ms(policy, 10_000, "j@1") == 5000
    assert base_delay_ms(RetryPolicy(initial_backoff_ms=0, multiplier=1e300), 50) == 0


def test_retry_after_raises_the_delay_up_to_the_cap() -> None:
    assert retry_delay_ms(NO_JITTER, 1, "j@1", retry_after_s=3) == 3000
    assert retry_delay_ms(NO_JITTER, 1, "j@1", retry_after_s=0.5) == 1000
    assert retry_delay_ms(NO_JITTER, 1, "j@1", retry_after_s=3600) == 10_000


def test_should_retry_until_max_attempts_and_only_when_retryable() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert should_retry(policy, 1, True)
    assert should_retry(policy, 2, True)
    assert not should_retry(policy, 3, True)
    assert not should_retry(policy, 1, False)
    assert not should_retry(RetryPolicy(max_attempts=1), 1, True)


def test_policy_from_avro_record_with_defaults() -> None:
    assert RetryPolicy.from_record({}) == RetryPolicy()
    record = {
        "max_attempts": 5,
        "initial_backoff_ms": 10,
        "multiplier": 3.0,
        "max_backoff_ms": 100,
        "jitter_ratio": 0.0,
    }
    policy = RetryPolicy.from_record(record)
    assert [retry_delay_ms(policy, a, "x") for a in (1, 2, 3)] == [10, 30, 90]
