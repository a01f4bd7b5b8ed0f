"""A real Prometheus (Debian's ``prometheus`` package) scraping the emulator's ``/metrics``.

Installed with apt when missing (as root, or through sudo, like the Makefile installs chromium), started
bound to 127.0.0.1 on a free port with a temporary configuration and storage directory, scraping every
second, and stopped (its whole session) afterwards. Every wait is bounded and says what it saw.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml
from e2e_airflow import ManagedProcess, free_port, wait_until

from tests.docs_snippets import documented_block

PROMETHEUS_BINARY = "prometheus"
SCRAPE_INTERVAL_SECONDS = 1
INSTALL_TIMEOUT = 600.0
DOCUMENTED_TARGET = "127.0.0.1:8900"
"""The emulator's address in the analysis guide's scrape config (the quickstart's port)."""


def scrape_config(metrics_url: str, interval_seconds: float = SCRAPE_INTERVAL_SECONDS) -> str:
    """The analysis guide's ``prometheus.yml`` (``docs/guides/analysis.md``), pointed at ``metrics_url`` and
    scraping every ``interval_seconds``: the configuration the guide shows is the one this Prometheus runs.

    :param metrics_url: the URL to scrape (the emulator's ``/metrics``).
    :param interval_seconds: the scrape and evaluation interval.
    """
    config = yaml.safe_load(documented_block("guides/analysis.md", "prometheus:scrape-config"))
    target = urlsplit(metrics_url)
    (job,) = config["scrape_configs"]
    (static,) = job["static_configs"]
    assert static["targets"] == [DOCUMENTED_TARGET], f"the guide's scrape target changed: {static['targets']}"
    assert job["metrics_path"] == (target.path or "/metrics"), f"the guide scrapes {job['metrics_path']}"
    static["targets"] = [target.netloc]
    every = f"{interval_seconds:g}s"
    config["global"].update(scrape_interval=every, evaluation_interval=every)
    job.update(scrape_interval=every, scrape_timeout=every)  # a timeout may not exceed the interval
    return yaml.safe_dump(config, sort_keys=False)


class PrometheusUnavailable(RuntimeError):
    """Prometheus is not installed and cannot be installed here."""


def ensure_prometheus() -> str:
    """The path of the ``prometheus`` binary, installing Debian's package first when it is missing."""
    found = shutil.which(PROMETHEUS_BINARY)
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise PrometheusUnavailable("prometheus is not installed and there is no apt-get to install it")
    sudo: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise PrometheusUnavailable("prometheus is not installed; installing it needs root or sudo")
        sudo = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "prometheus"]):
        done = subprocess.run(
            [*sudo, *command], env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
            raise PrometheusUnavailable(f"`{' '.join(command)}` failed with {done.returncode}:\n{tail}")
    found = shutil.which(PROMETHEUS_BINARY)
    if not found:
        raise PrometheusUnavailable("apt-get installed prometheus but it is not on PATH")
    return found


class Prometheus:
    """Prometheus scraping one ``/metrics`` URL every second, as a child process.

    :param workdir: where its configuration, storage and log go.
    :param metrics_url: the URL to scrape (the emulator's ``/metrics``).
    """

    def __init__(self, workdir: Path, metrics_url: str) -> None:
        self.binary = ensure_prometheus()
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        workdir.mkdir(parents=True, exist_ok=True)
        config.write_text(scrape_config(metrics_url))
        command = [
            self.binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=1h",
            "--log.level=warn",
        ]
        self.process = ManagedProcess("prometheus", command, dict(os.environ), workdir / "prometheus.log", workdir)
        self._http = httpx.Client(base_url=self.url, timeout=5)

    def __enter__(self) -> Prometheus:
        """Start it and wait until it has scraped the emulator."""
        self.start()
        try:
            self.wait_target_up(timeout=60)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> Prometheus:
        """Start it without waiting (it starts while something else does); :meth:`wait_target_up` before using
        it, :meth:`stop` afterwards."""
        self.process.start()
        return self

    def stop(self) -> None:
        """Stop it (its whole session) and close the client."""
        self._http.close()
        self.process.stop(grace=10)

    def connection_json(self) -> str:
        """An Airflow connection to this Prometheus, as an ``AIRFLOW_CONN_*`` value."""
        return json.dumps({"conn_type": "http", "host": self.url})

    def _get(self, path: str, **params: Any) -> dict[str, Any]:
        response = self._http.get(path, params=params)
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets (``health``, ``lastError``, ``scrapeUrl``...)."""
        return list(self._get("/api/v1/targets")["data"]["activeTargets"])

    def wait_target_up(self, timeout: float) -> None:
        """Wait until Prometheus answers and has scraped the emulator successfully."""
        seen: list[Any] = []

        def up() -> bool:
            if not self.process.alive:
                raise AssertionError(f"prometheus exited at start-up\n{self.process.tail()}")
            try:
                targets = self.targets()
            except httpx.HTTPError as error:
                seen[:] = [f"API not answering: {error!r}"]
                return False
            seen[:] = [[(target["scrapeUrl"], target["health"], target["lastError"]) for target in targets]]
            return bool(targets) and all(target["health"] == "up" for target in targets)

        wait_until(
            up,
            timeout=timeout,
            what="prometheus scrapes the emulator",
            interval=0.5,
            diagnostics=lambda: f"last seen: {seen}\n{self.process.tail()}",
        )

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result vector of an instant query."""
        body = self._get("/api/v1/query", query=promql)
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def value_by_label(self, promql: str, label: str) -> dict[str, float]:
        """``{label value: sample value}`` of an instant query's vector."""
        return {sample["metric"].get(label, ""): float(sample["value"][1]) for sample in self.query(promql)}
