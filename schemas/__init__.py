"""Avro schemas of kafkron's records (``*.avsc`` files in this folder) and where to find them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parent


def schema_paths() -> list[Path]:
    """Every ``.avsc`` file shipped with kafkron, sorted by name."""
    return sorted(SCHEMA_DIR.glob("*.avsc"))


def latest_schema_path(stem: str) -> Path:
    """The newest ``<stem>.v<N>.avsc`` shipped (highest N): what a codec writes by default."""
    paths = list(SCHEMA_DIR.glob(f"{stem}.v*.avsc"))
    if not paths:
        raise LookupError(f"no schema {stem}.v<N>.avsc in {SCHEMA_DIR}")
    return max(paths, key=lambda path: int(path.name.split(".v")[-1].removesuffix(".avsc")))


def field_defaults(record_name: str) -> dict[str, Any]:
    """The defaults the schemas give the fields of the named record (``kafkron.RetryPolicy``),
    as JSON values: the one place such defaults are written; code that needs them reads them
    here."""
    for path in schema_paths():
        found = _find_record(json.loads(path.read_text(encoding="utf-8")), "kafkron")
        defaults = found.get(record_name)
        if defaults is not None:
            return defaults
    raise LookupError(f"no schema in {SCHEMA_DIR} defines a record named {record_name}")


def _find_record(schema: Any, namespace: str) -> dict[str, dict[str, Any]]:
    """Every record defined inside ``schema``: full name -> its fields' defaults."""
    found: dict[str, dict[str, Any]] = {}
    if isinstance(schema, list):
        for branch in schema:
            found.update(_find_record(branch, namespace))
    elif isinstance(schema, dict):
        namespace = schema.get("namespace", namespace)
        if schema.get("type") == "record":
            fields = schema["fields"]
            found[f"{namespace}.{schema['name']}"] = {
                f["name"]: f["default"] for f in fields if "default" in f
            }
            for field in fields:
                found.update(_find_record(field["type"], namespace))
        for key in ("items", "values"):
            if key in schema:
                found.update(_find_record(schema[key], namespace))
    return found
