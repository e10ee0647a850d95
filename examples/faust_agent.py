"""A faust agent on kafkron's topics: every dead-lettered execution gets a follow-up job.

It reads ``job-results`` and, for each DEAD_LETTER, creates a one-off job (handler
``examples.echo``, due now, the dead execution in its payload) on ``jobs``: any downstream
reaction to a result that must itself be scheduled works like this. It runs in an
environment with faust-streaming (README, "faust agents")::

    KAFKRON_BOOTSTRAP_SERVERS=127.0.0.1:9092 python -m examples.faust_agent worker -l info
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import faust

from services.faust_codecs import ExecutionResult, job_command, kafkron_topics


def make_app(bootstrap: str, namespace: str, app_id: str = "kafkron-dead-letter-followups") -> Any:
    """The faust app and its one agent, for a cluster at ``bootstrap``."""
    app = faust.App(app_id, broker=f"kafka://{bootstrap}", value_serializer="raw")
    results, jobs = kafkron_topics(app, namespace)

    @app.agent(results)
    async def follow_up(stream: Any) -> None:
        async for result in stream:
            if isinstance(result, ExecutionResult) and result.status == "DEAD_LETTER":
                payload = {"execution_id": result.execution_id, "reason": result.reason}
                command = job_command(
                    f"followup-{result.execution_id}",
                    "examples.echo",
                    run_at_ms=int(time.time() * 1000),
                    payload=json.dumps(payload).encode(),
                    labels={"follows": result.job_id},
                )
                await jobs.send(key=command.job_id, value=command)

    return app


def main() -> None:
    """Run faust's command line (``worker``, ...) on an app built from the environment."""
    app = make_app(
        os.environ.get("KAFKRON_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        os.environ.get("KAFKRON_NAMESPACE", "kafkron."),
        os.environ.get("KAFKRON_FAUST_APP_ID", "kafkron-dead-letter-followups"),
    )
    app.main()


if __name__ == "__main__":
    main()
