"""Handlers of the DAG tests' executors (registered by module path)."""

from __future__ import annotations

import os
from pathlib import Path

from services.executor.context import HandlerContext
from tests.services.executor.test_service_kit import record_effect

GATE_ENV = "KAFKRON_TEST_GATE"
GATED_SPEC = "tests.gated=tests.services.dag.handlers:gated"


async def gated(ctx: HandlerContext) -> None:
    """Fails while the file named by ``KAFKRON_TEST_GATE`` does not exist; then records its
    effect like ``tests.effect``."""
    if not Path(os.environ[GATE_ENV]).exists():
        raise RuntimeError("the gate is closed")
    await record_effect(ctx)
