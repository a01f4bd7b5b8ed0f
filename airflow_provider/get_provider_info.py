"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``).

Imports nothing heavy: Airflow calls this on every start-up.
"""

from __future__ import annotations

from typing import Any

from airflow_provider import __version__, defaults

PACKAGE_NAME = "airflow-provider-deployment-service"
HOOK_CLASS = "airflow_provider.hooks.deployment_service.DeploymentServiceHook"
ASSET_SCHEME = "deployment-service"
"""URI scheme of deployment assets (``airflow_provider.assets.ASSET_SCHEME``; a test keeps them equal)."""
ASSET_URI_NORMALIZER = "airflow_provider.assets.normalize_deployment_uri"
PLUGIN_NAME = "deployment_service_rollouts"
"""The Rollouts view's plugin name (``plugins.rollouts.plugin.PLUGIN_NAME``; a test keeps them equal)."""
PLUGIN_CLASS = "airflow_provider.plugins.rollouts.plugin.RolloutsViewPlugin"


def _field(label: str, json_type: str, description: str, **schema: Any) -> dict[str, Any]:
    return {"label": label, "description": description, "schema": {"type": [json_type, "null"], **schema}}


CONN_FIELDS: dict[str, dict[str, Any]] = {
    "tenant_id": _field(
        "Workspace (tenant) ID",
        "string",
        "Sent as X-Tenant-Id. Required for organization-scoped API keys.",
    ),
    "connect_timeout": _field(
        "Connect timeout (s)", "number", "Seconds to open a connection.", default=defaults.DEFAULT_CONNECT_TIMEOUT
    ),
    "read_timeout": _field(
        "Read timeout (s)", "number", "Seconds to wait for an answer.", default=defaults.DEFAULT_READ_TIMEOUT
    ),
    "verify": _field("Verify TLS", "boolean", "Verify the service's TLS certificate.", default=True),
    "ca_bundle": _field("CA bundle path", "string", "PEM file of CAs to trust instead of the system ones."),
    "allow_insecure_http": _field(
        "Allow API key over plain http",
        "boolean",
        "Only for trusted networks: send the key to a non-loopback http:// URL.",
        default=False,
    ),
    "max_attempts": _field(
        "Attempts per call", "integer", "Including the first; 1 = no retry.", default=defaults.DEFAULT_MAX_ATTEMPTS
    ),
    "backoff_initial": _field(
        "First backoff (s)", "number", "Doubles each retry, full jitter.", default=defaults.DEFAULT_BACKOFF_INITIAL
    ),
    "backoff_max": _field(
        "Longest backoff (s)", "number", "Cap of one backoff delay.", default=defaults.DEFAULT_BACKOFF_MAX
    ),
    "retry_after_max": _field(
        "Longest Retry-After honoured (s)",
        "number",
        "Cap on waiting for a Retry-After header.",
        default=defaults.DEFAULT_RETRY_AFTER_MAX,
    ),
}

UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "port", "login"],
    "relabeling": {"host": "Base URL", "password": "API key"},
    "placeholders": {
        "host": "https://api.example.com (self-hosted: https://<host>/api-host)",
        "password": "service API key (sent as X-Api-Key)",
        "tenant_id": "optional workspace UUID",
    },
}


def get_provider_info() -> dict[str, Any]:
    """Return the provider description Airflow validates against ``provider_info.schema.json``."""
    return {
        "package-name": PACKAGE_NAME,
        "name": "Deployment Management Service",
        "description": "Patch deployments of the Deployment Management Service and wait for revisions to go live.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Deployment Management Service",
                "tags": ["service"],
            }
        ],
        "hooks": [
            {
                "integration-name": "Deployment Management Service",
                "python-modules": ["airflow_provider.hooks.deployment_service"],
            }
        ],
        "operators": [
            {
                "integration-name": "Deployment Management Service",
                "python-modules": [
                    "airflow_provider.operators.deployment_service",
                    "airflow_provider.operators.base",
                    "airflow_provider.operators.lists",
                    "airflow_provider.operators.patch",
                    "airflow_provider.operators.rollback",
                    "airflow_provider.operators.fleet",
                    "airflow_provider.operators.analysis",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "Deployment Management Service",
                "python-modules": ["airflow_provider.sensors.deployment_service"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Deployment Management Service",
                "python-modules": [
                    "airflow_provider.triggers.deployment_service",
                    "airflow_provider.triggers.poller",
                    "airflow_provider.triggers.rollout",
                    "airflow_provider.triggers.fleet",
                    "airflow_provider.triggers.watcher",
                    "airflow_provider.triggers.analysis",
                    "airflow_provider.triggers.guard",
                ],
            }
        ],
        "connection-types": [
            {
                "connection-type": defaults.CONN_TYPE,
                "hook-class-name": HOOK_CLASS,
                "hook-name": "Deployment Management Service",
                "conn-fields": CONN_FIELDS,
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
            }
        ],
        "extra-links": ["airflow_provider.operators.deployment_service.DeploymentLink"],
        "asset-uris": [{"schemes": [ASSET_SCHEME], "handler": ASSET_URI_NORMALIZER}],
        "plugins": [{"name": PLUGIN_NAME, "plugin-class": PLUGIN_CLASS}],
    }
