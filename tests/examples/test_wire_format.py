"""docs/wire-format.md, proven: readers that do not import kafkron decode what kafkron wrote.

The records are the session pipeline's, written to ``job-results`` by the timer and the
executor on the real broker. One reader is ``examples/plain_avro_consumer.py`` (fastavro and
confluent-kafka only, the .avsc files from disk) in a subprocess that fails if any kafkron
package was imported; the other is Apache Avro's Java ``BinaryMessageDecoder``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from streams.topics import TopicNames

from .conftest import PipelineResults

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
JAVA_DIR = ROOT / "examples" / "java"
JAVA_LIBS = ROOT / ".state" / "avro-java-libs"
KAFKRON_PACKAGES = ("streams", "services", "schemas", "infra", "bench", "examples", "tests")

# Runs the example as __main__ in an isolated interpreter (-I: no PYTHONPATH, no cwd on
# sys.path), then fails if anything of kafkron was imported.
RUNNER = """
import runpy, sys
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
leaked = sorted(m for m in sys.modules if m.split(".")[0] in PACKAGES)
if leaked:
    sys.exit(f"kafkron modules were imported: {leaked}")
""".replace("PACKAGES", repr(KAFKRON_PACKAGES))


def test_fastavro_alone_decodes_kafkron_results(
    pipeline_results: PipelineResults, tmp_path: Path
) -> None:
    settings = pipeline_results.settings
    done = subprocess.run(
        [sys.executable, "-I", "-c", RUNNER, str(ROOT / "examples" / "plain_avro_consumer.py"),
         "--bootstrap", settings.bootstrap_servers,
         "--topic", TopicNames(settings.namespace).job_results,
         "--schemas", str(SCHEMAS), "--idle-s", "3"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    decoded = [json.loads(line) for line in done.stdout.splitlines()]
    by_position = {(r.partition, r.offset): r for r in pipeline_results.records}
    assert len(decoded) == len(by_position) > 20
    statuses = set()
    for record in decoded:
        raw = by_position[(record.pop("partition"), record.pop("offset"))]
        assert record.pop("key") == raw.key.decode() == record["job_id"]
        assert record == raw.decoded
        statuses.add(record["status"])
    assert {"SUCCEEDED", "FAILED", "DEAD_LETTER"} <= statuses  # noop, flaky, fail


def _avro_jars(tmp_path: Path) -> Path:
    """org.apache.avro:avro and its dependencies from Maven Central (cached in .state)."""
    if shutil.which("java") is None or shutil.which("mvn") is None:
        pytest.skip(
            "Java's Avro check needs java (17+) and mvn on PATH; `./dev` setup installs them"
        )
    if not any(JAVA_LIBS.glob("avro-*.jar")):
        done = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(JAVA_DIR / "pom.xml"), "dependency:copy-dependencies",
             f"-DoutputDirectory={JAVA_LIBS}"],
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            pytest.skip(f"could not fetch org.apache.avro:avro with Maven: {done.stdout[-500:]}")
    return JAVA_LIBS


def test_java_binary_message_decoder_decodes_kafkron_results(
    pipeline_results: PipelineResults, tmp_path: Path
) -> None:
    libs = _avro_jars(tmp_path)
    values = tmp_path / "values.hex"
    values.write_text("\n".join(r.value.hex() for r in pipeline_results.records))
    done = subprocess.run(
        ["java", "-cp", f"{libs}/*", str(JAVA_DIR / "DecodeResults.java"), str(SCHEMAS),
         str(values)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    decoded = [json.loads(line) for line in done.stdout.splitlines()]
    assert decoded == [r.decoded for r in pipeline_results.records]
