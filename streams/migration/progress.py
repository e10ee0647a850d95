"""Where a namespace migration is: its plan and the last step it finished, in a JSON file of
its work directory, rewritten (atomically) after each step, so a migration that stopped can
be resumed (``kafkron migrate --resume DIR``) and repeats only steps whose writes repeat
harmlessly (the same records, the same versions)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path

from streams.migration.exceptions import MigrationRefusedError

STATE_FILE = "migration.json"


class Phase(StrEnum):
    """The last step a migration finished."""

    PLANNED = "planned"
    CUT_WRITTEN = "cut-written"
    CUT_APPLIED = "cut-applied"
    COPIED = "copied"
    DONE = "done"
    ROLLING_BACK = "rolling-back"
    ROLLED_BACK = "rolled-back"


@dataclass
class MigrationState:
    """The plan of one migration (fixed once planned) and its phase."""

    old_namespace: str
    new_namespace: str
    partitions: int
    cutover_ms: int
    stamp_ms: int
    deadline_ms: int
    snapshot_ends: dict[int, int]
    phase: Phase = Phase.PLANNED
    notes: list[str] = field(default_factory=list)

    def save(self, work_dir: Path) -> None:
        """Write the state file (a new file renamed over the old: never half written)."""
        path = work_dir / STATE_FILE
        temporary = path.with_suffix(".tmp")
        body = {**asdict(self), "snapshot_ends": {str(p): o for p, o in self.snapshot_ends.items()}}
        temporary.write_text(json.dumps(body, indent=2) + "\n")
        os.replace(temporary, path)

    @classmethod
    def load(cls, work_dir: Path) -> MigrationState:
        path = work_dir / STATE_FILE
        try:
            body = json.loads(path.read_text())
            body["snapshot_ends"] = {int(p): o for p, o in body["snapshot_ends"].items()}
            body["phase"] = Phase(body["phase"])
            return cls(**body)
        except FileNotFoundError:
            raise MigrationRefusedError(
                f"{work_dir} holds no migration ({STATE_FILE} is missing): give the work "
                "directory a migration printed when it started"
            ) from None
        except (ValueError, TypeError, KeyError) as exc:
            raise MigrationRefusedError(f"{path} is not a migration's state: {exc}") from exc
