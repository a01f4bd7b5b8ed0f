"""Triggers of the Deployment Management Service, one module per family over the shared batched poller.

A trigger's ``serialize()`` returns its public class path,
``airflow_provider.triggers.deployment_service.<class>``: the path the metadata database already holds for
deferred tasks and ``AssetWatcher`` triggers, so a trigger written by an earlier version loads after an
upgrade, an ``AssetWatcher``'s trigger stays the same one (its identity is its class path and kwargs), and
one written now still loads after a downgrade. A subclass serializes its own class path.
"""

from __future__ import annotations

import sys
from typing import Any

PUBLIC_MODULE = "airflow_provider.triggers.deployment_service"
"""The module every trigger of this package is imported from by its serialized class path."""


def serialized_classpath(trigger: object, public_class: type) -> str:
    """The class path ``trigger.serialize()`` returns: ``public_class``'s path under :data:`PUBLIC_MODULE`
    when ``trigger`` is exactly that class, else the path of ``trigger``'s own class (a subclass).

    :param trigger: the trigger being serialized.
    :param public_class: the class whose ``serialize()`` is running (one re-exported by :data:`PUBLIC_MODULE`).
    """
    cls = type(trigger)
    if cls is public_class:
        return f"{PUBLIC_MODULE}.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def default_store(uri: str) -> Any | None:
    """The asset state store of the asset named ``uri`` as a trigger reaches it (through the triggerer's
    supervisor), or ``None`` outside a triggerer.

    :param uri: the asset's name.
    """
    # Airflow's task runner, imported already wherever a supervisor runs us (never imported here: no cost).
    task_runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    if getattr(task_runner, "SUPERVISOR_COMMS", None) is None:
        return None
    try:
        from airflow.sdk.execution_time.context import AssetStateStoreAccessor
    except ImportError:  # pragma: no cover - Airflow < 3.3
        return None
    return AssetStateStoreAccessor(name=uri)
