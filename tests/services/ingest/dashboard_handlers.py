"""Handlers of the dashboard's browser tests' executor (registered by module path)."""

from __future__ import annotations

import os
from pathlib import Path

from services.executor.context import HandlerContext
from services.executor.exceptions import NonRetryableError

SEEN_DIR_ENV = "KAFKRON_TEST_SEEN_DIR"
FAILS_FIRST_SPEC = "tests.fails_first=tests.services.ingest.dashboard_handlers:fails_first"


async def fails_first(ctx: HandlerContext) -> None:
    """Fails (not retryable: dead-lettered at once) the first time it sees an execution,
    succeeds every later time: a dead letter's replay succeeds. What it saw is a file per
    execution id in the folder named by ``KAFKRON_TEST_SEEN_DIR``."""
    seen = Path(os.environ[SEEN_DIR_ENV]) / ctx.execution_id.replace("/", "_")
    if not seen.exists():
        seen.touch()
        raise NonRetryableError(f"{ctx.execution_id}: the first run of an execution fails")
