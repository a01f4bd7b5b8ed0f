"""Generate ``example.json``, the emulator's shipped seed data, deterministically.

Run ``python airflow_provider/emulator/data/generate_example.py`` after changing it; the output is the
same on every run. The data has 250 deployments (so pagination is real) over every source, deployment
type and status, with tags, image versions, secrets, two OAuth providers and two integrations with
repositories. Names include ``checkout-api-dev``, ``checkout-api-prod`` and ``search-dev``, plus near
misses (``checkout-api-dev-eu``, ``legacy-checkout-api-dev``) that a substring search also returns.
Most deployments name no tenant (they belong to the emulator's configured tenant); a few belong to a
second workspace, ``OTHER_TENANT_ID``.
"""

from __future__ import annotations

import json
import random
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

SEED = 20250106
COUNT = 250
BASE_TIME = datetime(2025, 1, 6, 9, 0, tzinfo=timezone.utc)
OTHER_TENANT_ID = "5b0c3f4e-8a1d-4c2b-9e7f-0a1b2c3d4e5f"
INTEGRATIONS = {
    "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a": ("acme-corp", ["checkout-api", "search", "billing-worker", "support-bot"]),
    "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d": ("acme-labs", ["recommendation-agent", "catalog-graph", "fraud-detector"]),
}
SERVICES = [
    "checkout-api",
    "search",
    "billing-worker",
    "support-bot",
    "recommendation-agent",
    "catalog-graph",
    "fraud-detector",
    "pricing-engine",
    "inventory-sync",
    "notification-hub",
    "ledger-service",
    "onboarding-flow",
]
ENVIRONMENTS = {"dev": "dev", "staging": "dev", "prod": "prod", "sandbox": "dev_free"}
IMAGE_VERSIONS = ["0.3.9", "0.4.0", "0.4.1", "0.5.0"]
STATUSES = ["READY"] * 16 + ["AWAITING_DATABASE", "UNUSED", "AWAITING_DELETE", "UNKNOWN"]
SOURCES = (
    ["codehost"] * 10
    + ["external_docker"] * 3
    + ["internal_docker"] * 3
    + ["internal_source"] * 2
    + ["internal_template"]
)


class _Ids:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))


def _time(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def _names() -> list[str]:
    names = [f"{service}-{env}" for service in SERVICES for env in ENVIRONMENTS]
    names += ["checkout-api-dev-eu", "legacy-checkout-api-dev", "search-dev-experiments"]
    number = 100
    while len(names) < COUNT:
        names.append(f"{SERVICES[number % len(SERVICES)]}-pr-{number}")
        number += 7
    return names[:COUNT]


def _repos() -> dict[str, list[dict[str, Any]]]:
    integrations: dict[str, list[dict[str, Any]]] = {}
    repo_id = 700100
    for integration_id, (owner, repos) in INTEGRATIONS.items():
        integrations[integration_id] = []
        for name in repos:
            repo_id += 13
            integrations[integration_id].append(
                {
                    "host_integration_id": integration_id,
                    "id": repo_id,
                    "name": name,
                    "owner": owner,
                    "url": f"https://codehost.example.com/{owner}/{name}",
                    "default_branch": "main" if repo_id % 2 else "master",
                }
            )
    return integrations


def _oauth_providers(ids: _Ids) -> list[dict[str, Any]]:
    organization_id = ids.uuid()
    created = _time(BASE_TIME - timedelta(days=30))
    return [
        {
            "id": ids.uuid(),
            "organization_id": organization_id,
            "provider_id": "codehost-oauth",
            "name": "Code host",
            "client_id": "Iv1.example0client",
            "auth_url": "https://codehost.example.com/login/oauth/authorize",
            "token_url": "https://codehost.example.com/login/oauth/access_token",
            "uses_pkce": True,
            "code_challenge_method": "S256",
            "created_at": created,
            "updated_at": created,
            "provider_type": "oauth2",
            "mcp_server_url": None,
            "token_endpoint_auth_method": "client_secret_post",
            "is_dynamic_client": False,
        },
        {
            "id": ids.uuid(),
            "organization_id": organization_id,
            "provider_id": "docs-mcp",
            "name": "Docs MCP server",
            "client_id": "docs-mcp-client",
            "auth_url": "https://mcp.example.com/oauth/authorize",
            "token_url": "https://mcp.example.com/oauth/token",
            "uses_pkce": True,
            "code_challenge_method": "S256",
            "created_at": created,
            "updated_at": created,
            "provider_type": "mcp",
            "mcp_server_url": "https://mcp.example.com/mcp",
            "token_endpoint_auth_method": "none",
            "is_dynamic_client": True,
        },
    ]


def _deployment(
    index: int, name: str, rng: random.Random, ids: _Ids, tags: list[str], repos: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    env = next((env for env in ENVIRONMENTS if name.endswith(f"-{env}")), "sandbox")
    created = BASE_TIME + timedelta(minutes=37 * index)
    source = "codehost" if name in ("checkout-api-dev", "checkout-api-prod", "search-dev") else rng.choice(SOURCES)
    service = next(service for service in SERVICES if service in name)
    entry: dict[str, Any] = {
        "id": ids.uuid(),
        "name": name,
        "source": source,
        "created_at": _time(created),
        "updated_at": _time(created + timedelta(hours=rng.randint(0, 400))),
        "status": "READY" if index < 20 else rng.choice(STATUSES),
        "image_version": rng.choice(IMAGE_VERSIONS),
        "deployment_type": ENVIRONMENTS[env],
        "tag_value_ids": sorted(rng.sample(tags, rng.randint(0, 2))),
        "remote_reconciled": rng.random() < 0.3,
    }
    if index % 25 == 24:
        entry["tenant_id"] = OTHER_TENANT_ID
    source_config: dict[str, Any] = {}
    revision: dict[str, Any] = {}
    if source == "codehost":
        integration_id, repo = next(
            ((key, repo) for key, values in repos.items() for repo in values if repo["name"] == service),
            (next(iter(repos)), next(iter(repos.values()))[0]),
        )
        source_config = {"integration_id": integration_id, "repo_url": repo["url"], "build_on_push": env != "prod"}
        revision = {
            "repo_ref": repo["default_branch"],
            "graph_config_path": "graph.json",
            "repo_commit_sha": f"{rng.getrandbits(160):040x}",
        }
    elif source in ("external_docker", "internal_docker"):
        revision = {"image_uri": f"registry.example.com/acme/{service}:{entry['image_version']}"}
        if source == "external_docker":
            source_config = {"listener_id": ids.uuid(), "listener_config": {"k8s_namespace": f"agents-{env}"}}
            entry["secret_references"] = [{"name": "DATABASE_URL", "secret_name": f"{service}-db", "secret_key": "url"}]
    elif source == "internal_source":
        revision = {"source_tarball_path": f"uploads/{service}/{index:04d}.tar.gz", "graph_config_path": "graph.json"}
    if env == "prod":
        source_config["resource_spec"] = {
            "min_scale": 2,
            "max_scale": 6,
            "cpu": 1.5,
            "memory_mb": 2048,
            "db_storage_gi": 20,
        }
    entry["source_config"] = source_config
    entry["source_revision_config"] = revision
    if index % 3 == 0:
        entry["secrets"] = [{"name": "MODEL_API_KEY", "value": f"example-secret-value-{index:03d}"}]
    if entry["status"] == "AWAITING_DATABASE":
        entry["active_revision_id"] = None
        entry["latest_revision_id"] = ids.uuid()
    elif index % 40 == 7:
        # A rollout in progress: the latest revision starts building when the data is loaded.
        entry["active_revision_id"] = ids.uuid()
        entry["latest_revision_id"] = ids.uuid()
    return entry


def generate() -> dict[str, Any]:
    """The example data."""
    rng = random.Random(SEED)
    ids = _Ids(rng)
    tags = [ids.uuid() for _ in range(6)]
    repos = _repos()
    return {
        "oauth_providers": _oauth_providers(ids),
        "integrations": repos,
        "deployments": [_deployment(i, name, rng, ids, tags, repos) for i, name in enumerate(_names())],
    }


def main() -> None:
    """Write ``example.json`` next to this script."""
    path = Path(__file__).with_name("example.json")
    path.write_text(json.dumps(generate(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
