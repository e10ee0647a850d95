"""Fetch Apache Kafka's broker jars from Maven Central with the machine's Maven, once."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from infra.settings import BrokerSettings
from streams.exceptions import BrokerError

POM = Path(__file__).resolve().parent / "kafka-pom.xml"
_MARKER = ".kafkron-fetched"


def require_tool(name: str, install_hint: str) -> str:
    """The path of a tool on PATH, or a BrokerError telling the operator how to install it."""
    path = shutil.which(name)
    if path is None:
        raise BrokerError(f"'{name}' is not on PATH. Install it: {install_hint}")
    return path


def java_major_version() -> int:
    """The major version of the ``java`` on PATH (17 for OpenJDK 17)."""
    java = require_tool("java", "apt-get install openjdk-17-jre-headless (Java 17 or newer)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    text = out.stderr + out.stdout
    for token in text.replace('"', " ").split():
        head = token.split(".")[0]
        if head.isdigit() and int(head) >= 1:
            major = int(head)
            return int(token.split(".")[1]) if major == 1 else major
    raise BrokerError(f"could not read the Java version from: {text.strip()!r}")


def fetch_jars(settings: BrokerSettings) -> Path:
    """Copy Kafka and its runtime dependencies into ``settings.libs_dir/<kafka_version>``;
    reuse a good copy.

    Each version has its folder, so fetching one never removes the jars a running broker of
    another version was started from (the bench can run its own broker on another Kafka). A
    folder is wiped before copying, because jars of two versions on one classpath clash.
    """
    libs = settings.libs_dir.resolve() / settings.kafka_version
    wanted = f"kafka={settings.kafka_version} log4j={settings.log4j_version}"
    marker = libs / _MARKER
    if marker.exists() and marker.read_text() == wanted:
        return libs
    if java_major_version() < 17:
        raise BrokerError(
            "Kafka 4.x needs Java 17 or newer: apt-get install openjdk-17-jre-headless"
        )
    mvn = require_tool("mvn", "apt-get install maven")
    if libs.exists():
        shutil.rmtree(libs)
    libs.mkdir(parents=True)
    cmd = [
        mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={libs}",
        f"-Dkafka.version={settings.kafka_version}", f"-Dlog4j.version={settings.log4j_version}",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not any(libs.glob("kafka_2.13-*.jar")):
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise BrokerError(f"Maven could not fetch Kafka {settings.kafka_version}:\n{tail}")
    marker.write_text(wanted)
    return libs
