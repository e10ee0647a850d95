"""Test kit for the status view's property tests: a run of steps applied in batches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def batches(steps: list[Any], cuts: list[int]) -> Iterator[list[Any]]:
    """``steps`` split at each of ``cuts`` (positions, in any order, repeats ignored): the
    batches a store commits one by one, so a property holds across commit boundaries."""
    start = 0
    for cut in sorted(set(cuts)):
        yield steps[start:cut]
        start = cut
    yield steps[start:]
