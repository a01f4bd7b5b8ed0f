"""The demo's deployment watcher: a ``DeploymentEventTrigger`` run inline in a thread.

``airflow dags test`` runs no triggerer, so the demo runs the watcher's event loop itself, against the
emulator, exactly as the triggerer would for ``smoke_test_on_new_revision``'s ``AssetWatcher``, and
reports the event that would start that DAG.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any


class InlineWatcher:
    """Run a watcher for ``deployment_name`` in a background thread and collect its events.

    :param connection_json: the ``deployment_service_default`` connection as JSON.
    :param deployment_name: the deployment to watch.
    :param poll_interval: seconds between looks.
    """

    def __init__(self, connection_json: str, deployment_name: str, poll_interval: float) -> None:
        os.environ["AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT"] = connection_json
        self.deployment_name = deployment_name
        self.poll_interval = poll_interval
        self.payloads: list[dict[str, Any]] = []
        self.ready = threading.Event()
        self.fired = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._watch(),), daemon=True)

    async def _watch(self) -> None:
        from airflow_provider.triggers.deployment_service import DeploymentEventTrigger, active_pollers

        trigger = DeploymentEventTrigger(
            deployment_names=[self.deployment_name],
            events=["revision_live"],
            poll_interval=self.poll_interval,
            settle_time=self.poll_interval,  # announced at the look after the one that sees it live
        )
        events = trigger.run()
        first = asyncio.ensure_future(events.__anext__())
        while not self.ready.is_set():  # ready once the first poll round (the baseline) is done
            await asyncio.sleep(0.05)
            if any(poller.rounds_completed for poller in active_pollers()):
                self.ready.set()
        event = await first
        self.payloads.append(event.payload)
        self.fired.set()
        await events.aclose()

    def start(self, timeout: float = 30.0) -> InlineWatcher:
        self._thread.start()
        if not self.ready.wait(timeout):
            raise RuntimeError(f"the watcher made no first look within {timeout} s")
        return self

    def wait(self, timeout: float) -> dict[str, Any] | None:
        """The first event, or ``None`` when none came within ``timeout`` seconds."""
        return self.payloads[0] if self.fired.wait(timeout) else None
