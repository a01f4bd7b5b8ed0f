"""Command line: ``python -m airflow_provider.emulator --port 0 --api-key KEY``.

Prints exactly one line, ``Deployment service emulator listening on http://HOST:PORT``, once the port is
listening, then serves until SIGINT or SIGTERM.

Switches: ``--resource-spec-mode replace|merge`` (default ``replace``, production: a PATCH with a
``resource_spec`` creates a revision and replaces the spec; ``merge``: field by field, no revision);
``--disable-endpoint NAME`` (repeatable; ``get_deployment``, ``list_revisions``, ``get_revision``,
``redeploy``, ``revision_logs``, ``build_logs``, ``deploy_logs``) answers that production-only endpoint 404 (405
for ``get_deployment``);
``--no-optional-endpoints`` leaves them all out; ``--redeploy-mode new_revision|in_place`` (default
``new_revision``; ``in_place``: a redeploy makes no revision, the old one is deployed again);
``--unknown-fields`` plays a newer service whose answers carry fields the provider's models lack (see
``airflow_provider.emulator.unknown_fields``).
Deployments' apps answer at ``/apps/{deployment_id}``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
from types import FrameType

import uvicorn

from .seed import EmulatorDataError
from .server import API_KEY_ENV, LISTENING_LINE, QuickServer, bind_socket, check_host, url_for, uvicorn_config
from .state import OPTIONAL_ENDPOINTS, EmulatorState
from .web.app import create_app


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(
        prog="python -m airflow_provider.emulator", description="Run the Deployment Management Service emulator."
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface (loopback only unless --allow-non-loopback)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default)")
    parser.add_argument("--api-key", help=f"API key clients must send (default: ${API_KEY_ENV})")
    parser.add_argument("--tenant-id", help="organization-scoped mode: requests must send X-Tenant-Id")
    parser.add_argument("--data", help="seed data JSON file (default: the shipped example data)")
    parser.add_argument("--build-seconds", type=float, default=30.0, help="revision build duration (default 30)")
    parser.add_argument("--ready-seconds", type=float, default=10.0, help="delay before a new deployment is READY")
    parser.add_argument(
        "--no-optional-endpoints",
        action="store_true",
        help="do not serve the production-only endpoints (deployment, revisions, redeploy, logs)",
    )
    parser.add_argument(
        "--disable-endpoint",
        action="append",
        default=[],
        choices=OPTIONAL_ENDPOINTS,
        metavar="NAME",
        help=f"answer this production-only endpoint 404/405; repeatable; one of {', '.join(OPTIONAL_ENDPOINTS)}",
    )
    parser.add_argument(
        "--resource-spec-mode",
        choices=("replace", "merge"),
        default="replace",
        help="replace (production, default): a resource_spec PATCH creates a revision and replaces the spec; "
        "merge: the spec merges field by field, no revision",
    )
    parser.add_argument(
        "--redeploy-mode",
        choices=("new_revision", "in_place"),
        default="new_revision",
        help="new_revision (default): a redeploy creates a revision; in_place: it creates none, the old revision "
        "is deployed again",
    )
    parser.add_argument(
        "--updated-at-on-requests-only",
        action="store_true",
        help="a deployment's updated_at moves only on requests (PATCH, redeploy), not as its revisions go live",
    )
    parser.add_argument(
        "--unknown-fields",
        action="store_true",
        help="answer fields the provider's models lack (resource_spec, source_config, containers, revisions) and "
        "keep what a PATCH sends of them, as a newer production service would",
    )
    parser.add_argument("--frozen-clock", action="store_true", help="time moves only through the admin API")
    parser.add_argument("--path-prefix", default="", help="service path prefix, e.g. /api-host")
    parser.add_argument("--allow-non-loopback", action="store_true", help="allow a non-loopback --host")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the emulator until SIGINT or SIGTERM; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_host(args.host, args.allow_non_loopback)
    except ValueError as error:
        parser.error(str(error))
    api_key = args.api_key or os.environ.get(API_KEY_ENV)
    if not api_key:
        parser.error(f"an API key is required: --api-key or ${API_KEY_ENV}")
    try:
        state = EmulatorState(
            api_key=api_key,
            tenant_id=args.tenant_id,
            data=args.data,
            build_seconds=args.build_seconds,
            ready_seconds=args.ready_seconds,
            optional_endpoints=not args.no_optional_endpoints,
            frozen_clock=args.frozen_clock,
            path_prefix=args.path_prefix,
            resource_spec_mode=args.resource_spec_mode,
            disabled_endpoints=args.disable_endpoint,
            redeploy_mode=args.redeploy_mode,
            updated_at_on_requests_only=args.updated_at_on_requests_only,
            unknown_fields=args.unknown_fields,
        )
    except (EmulatorDataError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        sock = bind_socket(args.host, args.port)
    except OSError as error:
        print(f"error: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 1
    state.public_url = url_for(sock, args.host)
    server = QuickServer(uvicorn_config(create_app(state), log_level=args.log_level))

    def request_exit(signum: int, frame: FrameType | None) -> None:
        # uvicorn handles the signals while serving, then re-raises the one that stopped it: with this
        # handler in place that is a quiet, successful exit (and a signal before serving stops it too).
        server.should_exit = True

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, request_exit)
    asyncio.run(_serve(server, sock, url_for(sock, args.host, args.path_prefix)))
    return 0


async def _serve(server: uvicorn.Server, sock: socket.socket, url: str) -> None:
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    if server.started:
        print(LISTENING_LINE.format(url=url), flush=True)
    await task


if __name__ == "__main__":
    sys.exit(main())
