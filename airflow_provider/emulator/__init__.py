"""A local emulator of the Deployment Management Service, for tests and demos.

It serves the four endpoints of the spec (plus the production-only endpoints: get a deployment, list and
get revisions, redeploy a revision, revision logs; and an emulator-only ``POST /v2/deployments``) from
an in-memory store, with the production PATCH contract (:mod:`.contract`), a revision
state machine driven by a clock the tests control, emulated apps whose health a test can break
(:mod:`.health`) whose behaviour a test sets (:mod:`.behaviour`: error rate, latency, health status, changing
after N seconds), the tracing service's endpoints answering from that behaviour (:mod:`.tracing`), the
apps' traffic as Prometheus metrics (:mod:`.metrics`), fault injection and a request log under
``/_emulator`` (the app, the admin API and the middleware: :mod:`.web`). It depends only on
:mod:`airflow_provider.models`, never on the provider's client, so tests run one against the other over the wire.

Typical use (see also the pytest fixtures in :mod:`airflow_provider.emulator.pytest_plugin`)::

    with EmulatorServer(api_key="key", frozen_clock=True) as emulator:
        ...  # call emulator.base_url with X-Api-Key: key
        emulator.state.advance(30)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .admin_client import EmulatorAdmin, EmulatorAdminError
    from .clock import Clock
    from .contract.schema import PatchBody
    from .faults import CHAOS_KINDS, ChaosSettings, FaultKind, FaultRule, RequestRecord
    from .health import UnhealthyRule
    from .plans import Behaviour, BehaviourPlan, BehaviourRule
    from .seed import EmulatorDataError, example_data_path, load_data
    from .server import EmulatorServer
    from .state import (
        DEFAULT_TENANT_ID,
        OPTIONAL_ENDPOINTS,
        DeploymentFilters,
        EmulatorError,
        EmulatorState,
        NotFound,
    )
    from .web.app import create_app

# Exports load on first use, so importing a light submodule (state, clock) does not load the web stack.
_EXPORTS = {
    "Behaviour": "plans",
    "BehaviourPlan": "plans",
    "BehaviourRule": "plans",
    "CHAOS_KINDS": "faults",
    "DEFAULT_TENANT_ID": "state",
    "ChaosSettings": "faults",
    "Clock": "clock",
    "DeploymentFilters": "state",
    "EmulatorAdmin": "admin_client",
    "EmulatorAdminError": "admin_client",
    "EmulatorDataError": "seed",
    "EmulatorError": "state",
    "EmulatorServer": "server",
    "EmulatorState": "state",
    "FaultKind": "faults",
    "FaultRule": "faults",
    "NotFound": "state",
    "OPTIONAL_ENDPOINTS": "state",
    "PatchBody": "contract.schema",
    "RequestRecord": "faults",
    "UnhealthyRule": "health",
    "create_app": "web.app",
    "example_data_path": "seed",
    "load_data": "seed",
}
__all__ = [
    "CHAOS_KINDS",
    "DEFAULT_TENANT_ID",
    "OPTIONAL_ENDPOINTS",
    "Behaviour",
    "BehaviourPlan",
    "BehaviourRule",
    "ChaosSettings",
    "Clock",
    "DeploymentFilters",
    "EmulatorAdmin",
    "EmulatorAdminError",
    "EmulatorDataError",
    "EmulatorError",
    "EmulatorServer",
    "EmulatorState",
    "FaultKind",
    "FaultRule",
    "NotFound",
    "PatchBody",
    "RequestRecord",
    "UnhealthyRule",
    "create_app",
    "example_data_path",
    "load_data",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
