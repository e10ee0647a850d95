"""presenters.iso: epoch ms as ISO-8601 UTC by integer arithmetic, exact for every date."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.ingest.presenters import iso

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FIRST_MS = -62_135_596_800_000  # 0001-01-01T00:00:00.000Z
LAST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
YEAR_2100_MS = 4_102_444_800_000


def exact(ms: int) -> str:
    text = (EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


@given(st.integers(FIRST_MS, LAST_MS))
def test_iso_is_exact_for_every_representable_ms(ms: int) -> None:
    assert iso(ms) == exact(ms)


@given(st.integers(-YEAR_2100_MS, YEAR_2100_MS))
def test_iso_answers_as_the_float_conversion_did_until_2100(ms: int) -> None:
    before = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    assert iso(ms) == before.replace("+00:00", "Z")


def test_iso_edges_and_far_future_ms() -> None:
    assert iso(None) is None
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert iso(-1) == "1969-12-31T23:59:59.999Z"
    assert iso(FIRST_MS) == "0001-01-01T00:00:00.000Z"
    assert iso(LAST_MS) == "9999-12-31T23:59:59.999Z"
    # ms / 1000 as a float answered ...59.998 here
    assert iso(253_402_300_799_999) != datetime.fromtimestamp(
        253_402_300_799_999 / 1000, UTC
    ).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    with pytest.raises(ValueError):
        iso(LAST_MS + 1)
