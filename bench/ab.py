"""A/B runs that alternate: noise that drifts over a session (load) hits both sides alike."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def alternating(sides: Sequence[T], repeat: int) -> Iterator[tuple[int, T]]:
    """``(run, side)`` for ``repeat`` runs of every side, every other run in reverse order."""
    for run in range(repeat):
        for side in sides if run % 2 == 0 else sides[::-1]:
            yield run, side
