"""The Grafana dashboard and the Prometheus alert rules in the repository name only metrics
and labels the services export (so that a renamed metric cannot leave them behind).

No promtool here: the files are parsed as JSON and YAML, and each PromQL expression's metric
and label names are checked against the families the services' collectors build.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.dag.metrics import DagCollector
from services.dag.scope import DagEnv
from services.dag.settings import DagSettings
from services.executor.handlers import HandlerRegistry
from services.executor.loop import ExecutorLoop
from services.executor.metrics import ExecutorCollector
from services.executor.settings import ExecutorSettings
from services.ingest.metrics import ApiCollector
from services.timer.fire_stats import FireStats
from services.timer.metrics import TimerCollector
from services.timer.settings import TimerSettings
from streams.codec import Codec
from streams.metrics import Collector, metrics_registry
from streams.runtime_stats import RuntimeStats
from streams.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "infra" / "grafana" / "kafkron.json"
ALERTS = ROOT / "infra" / "prometheus" / "alerts.yml"
PROMETHEUS = ROOT / "infra" / "prometheus" / "prometheus.yml"
SYNTHETIC = {"up"}  # series Prometheus itself writes for each target
TARGET_LABELS = {"job", "instance"}  # labels every scraped series gets
SAMPLE_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "info": ("_info",),
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)?\s*\{([^}]*)\}")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_KNOWN_PREFIXES = re.compile(r"\b((?:kafkron|process|python)_\w+|up)\b")


def collectors() -> list[Collector]:
    kafka = KafkaSettings(namespace="k.")
    codec = Codec.from_directory()
    executor = ExecutorLoop(
        ExecutorSettings(kafka=kafka, worker_id="w", metrics_port=0), HandlerRegistry(), codec
    )
    return [
        TimerCollector(FireStats(), Counter(), RuntimeStats()),
        DagCollector(DagEnv.from_settings(DagSettings(kafka=kafka), codec), RuntimeStats()),
        ExecutorCollector(executor),
        ApiCollector(lambda: None),
    ]


def exported() -> tuple[set[str], dict[str, set[str]]]:
    """Sample names every service may export, and each one's label names."""
    names: set[str] = set()
    labels: dict[str, set[str]] = {}
    for family in metrics_registry(collectors()).collect():
        label_names = set(getattr(family, "_labelnames", ())) | {
            name for sample in family.samples for name in sample.labels
        }
        for suffix in SAMPLE_SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
            labels[family.name + suffix] = label_names | ({"le"} if suffix == "_bucket" else set())
    return names, labels


def dashboard_expressions() -> list[str]:
    document = json.loads(DASHBOARD.read_text())
    panels: list[dict[str, Any]] = []
    for panel in document["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def alert_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(ALERTS.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def metrics_and_labels(expr: str) -> tuple[set[str], set[str], set[str]]:
    """The metric names an expression selects, the labels its selectors match on, and the
    labels it groups by."""
    bare = _STRING.sub('""', expr)
    metrics = set(_KNOWN_PREFIXES.findall(bare))
    matched: set[str] = set()
    for name, matchers in _SELECTOR.findall(bare):
        if name:
            metrics.add(name)
        matched |= {m.split("=")[0].split("!")[0].strip() for m in matchers.split(",") if m}
    grouped = {
        label.strip() for group in _GROUPING.findall(bare) for label in group.split(",") if label
    }
    return metrics, matched, grouped


EXPRESSIONS = [("dashboard", e) for e in dashboard_expressions()] + [
    ("alert " + rule["alert"], rule["expr"]) for rule in alert_rules()
]


@pytest.mark.parametrize(("where", "expr"), EXPRESSIONS, ids=[w for w, _ in EXPRESSIONS])
def test_every_metric_and_label_an_expression_uses_is_exported(where: str, expr: str) -> None:
    names, labels = exported()
    metrics, matched, grouped = metrics_and_labels(expr)
    assert metrics, f"{where}: no metric found in {expr!r}"
    unknown = metrics - names - SYNTHETIC
    assert not unknown, f"{where}: {sorted(unknown)} are not exported by any service ({expr!r})"
    known_labels = TARGET_LABELS.union(*(labels.get(m, set()) for m in metrics))
    assert matched <= known_labels, f"{where}: matches on {sorted(matched - known_labels)}"
    assert grouped <= known_labels, f"{where}: groups by {sorted(grouped - known_labels)}"


def test_the_parser_finds_a_misspelt_metric_and_label() -> None:
    names, labels = exported()
    metrics, matched, grouped = metrics_and_labels(
        'sum by (job, shard) (rate(kafkron_timer_fire_total{trigger="X", zone!=""}[5m]))'
    )
    assert metrics == {"kafkron_timer_fire_total"} and not metrics <= names
    assert matched == {"trigger", "zone"} and grouped == {"job", "shard"}
    assert "kafkron_timer_fires_total" in names
    assert labels["kafkron_timer_fire_lateness_seconds_bucket"] == {"trigger", "le"}


def test_the_dashboard_has_unique_panel_ids_and_the_alerts_say_what_to_do() -> None:
    document = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in document["panels"]]
    assert len(ids) == len(set(ids))
    rules = alert_rules()
    assert {"KafkronServiceDown", "KafkronFireLatenessHigh", "KafkronConsumerLagGrowing",
            "KafkronDeadLettersGrowing"} <= {rule["alert"] for rule in rules}  # fmt: skip
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_the_example_prometheus_config_scrapes_each_service_at_its_default_port() -> None:
    config = yaml.safe_load(PROMETHEUS.read_text())
    assert config["rule_files"] == [ALERTS.name]
    targets = {
        job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]
    }
    defaults = {
        "kafkron-timer": TimerSettings.model_fields["metrics_port"].default,
        "kafkron-executor": ExecutorSettings.model_fields["metrics_port"].default,
        "kafkron-dag": DagSettings.model_fields["metrics_port"].default,
        "kafkron-api": 9704,
    }
    assert targets == {job: [f"127.0.0.1:{port}"] for job, port in defaults.items()}
