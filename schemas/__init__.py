"""Avro schemas of kafkron's records (``*.avsc`` files in this folder) and where to find them."""

from __future__ import annotations

from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parent


def schema_paths() -> list[Path]:
    """Every ``.avsc`` file shipped with kafkron, sorted by name."""
    return sorted(SCHEMA_DIR.glob("*.avsc"))
