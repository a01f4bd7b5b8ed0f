"""The analysis guide's Prometheus example, checked without starting Prometheus (the real-Prometheus
end-to-end test, ``test_e2e_prometheus.py``, runs the same configuration): its scrape config is valid and
aimed at the emulator's ``/metrics``, and its query reads metrics the emulator exposes."""

from __future__ import annotations

import re
from typing import Any

import yaml
from e2e_prometheus import DOCUMENTED_TARGET, scrape_config

from tests.docs_snippets import DOCS, documented_block


def test_the_guides_scrape_config_is_the_one_the_e2e_prometheus_runs() -> None:
    built = yaml.safe_load(scrape_config("http://127.0.0.1:45678/metrics", interval_seconds=1))
    (job,) = built["scrape_configs"]
    assert job["static_configs"] == [{"targets": ["127.0.0.1:45678"]}]
    assert job["metrics_path"] == "/metrics"
    assert job["scrape_interval"] == job["scrape_timeout"] == built["global"]["scrape_interval"] == "1s"
    shown = yaml.safe_load(documented_block("guides/analysis.md", "prometheus:scrape-config"))
    assert shown["scrape_configs"][0]["static_configs"] == [{"targets": [DOCUMENTED_TARGET]}]


def test_the_guides_query_reads_metrics_the_emulator_exposes(deployment_service_emulator: Any) -> None:
    import httpx

    text = (DOCS / "guides" / "analysis.md").read_text()
    section = text[text.index("<!-- prometheus:scrape-config") :]
    query_block = re.search(r"```python\n(.*?)```", section, re.S)
    assert query_block is not None, "the guide shows no MetricQueryCheck after its scrape config"
    metrics = set(re.findall(r"rate\(([a-z_]+)\[", query_block.group(1)))
    assert metrics, f"no rate() over a metric in the guide's query: {query_block.group(1)}"
    exposed = httpx.get(f"{deployment_service_emulator.base_url}/metrics", timeout=10).text
    families = set(re.findall(r"^# TYPE (\S+) ", exposed, re.M))
    assert metrics <= families, f"the guide's query reads {sorted(metrics - families)}; /metrics has {sorted(families)}"
