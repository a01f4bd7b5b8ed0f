"""The emulator's state: configuration, store, clock, faults and request log (no HTTP code here).

Every public method takes the state lock and first settles every deployment to the clock's current
time, so the service, the admin API and Python tests always see the same, up-to-date state.

:class:`EmulatorState` is made of parts, one module each:

- :mod:`~airflow_provider.emulator.state.store`: the deployments under one lock, settled to the clock; the
  lookups, and how a deployment is shown (what every part stands on);
- :mod:`~airflow_provider.emulator.state.service`: the service's endpoints (listings, PATCH, redeploy,
  create);
- :mod:`~airflow_provider.emulator.state.admin`: the admin operations (clock, builds, statuses, snapshot,
  reset) and the switches changed at run time;
- :mod:`~airflow_provider.emulator.state.apps`: the emulated apps' health, behaviour and the traffic they
  served (tracing, metrics);
- :mod:`~airflow_provider.emulator.state.request_log`: faults, and the log and counters of the requests;
- :mod:`~airflow_provider.emulator.state.switches` and :mod:`~airflow_provider.emulator.state.errors`: the
  switches' values, and the refusals the parts raise.

Switches (constructor arguments, changeable at run time with
:meth:`~airflow_provider.emulator.state.admin.AdminSide.update_settings`):

* ``resource_spec_mode``: ``"replace"`` (default, production): a PATCH with a non-null
  ``source_config.resource_spec`` creates a revision and replaces the whole spec (unset ``*_limit`` fields
  default to twice their request; a limit below its request is refused with 422); ``"merge"`` (the older
  reading of the spec): the spec merges field by field and creates no revision.
* ``redeploy_mode``: ``"new_revision"`` (default): ``POST .../redeploy`` creates a revision copying the old
  one; ``"in_place"``: it creates none, the old revision itself is deployed again and becomes active while
  the newer one stays the latest (production does not document which it does).
* ``disabled_endpoints``: names from :data:`~airflow_provider.emulator.state.switches.OPTIONAL_ENDPOINTS` of
  production-only endpoints that answer as if they did not exist (404; ``get_deployment`` 405, since PATCH
  shares its path), so client fallbacks can be tested. ``optional_endpoints=False`` leaves them all out of
  the app instead.
* ``unknown_fields``: off (default), or on: the emulator plays a newer service whose answers carry fields the
  provider's models lack, nested ones too, and keeps what a PATCH sends of them (see
  :mod:`airflow_provider.emulator.unknown_fields`).
"""

from __future__ import annotations

from .admin import AdminSide
from .apps import AppSide
from .errors import EmulatorError as EmulatorError
from .errors import NotFound as NotFound
from .request_log import RequestLog
from .service import DeploymentFilters as DeploymentFilters
from .service import EmulatorCreateRequest as EmulatorCreateRequest
from .service import ServiceSide
from .service import StatusName as StatusName
from .store import DEFAULT_TENANT_ID as DEFAULT_TENANT_ID
from .switches import OPTIONAL_ENDPOINTS as OPTIONAL_ENDPOINTS
from .switches import OptionalEndpoint as OptionalEndpoint
from .switches import RedeployMode as RedeployMode
from .switches import ResourceSpecMode as ResourceSpecMode


class EmulatorState(ServiceSide, AdminSide, AppSide, RequestLog):
    """Everything the emulator knows; thread-safe; shared by the service app, the admin API and tests.

    Its methods are those of its parts: :class:`~airflow_provider.emulator.state.service.ServiceSide` (the
    service's endpoints), :class:`~airflow_provider.emulator.state.admin.AdminSide` (the clock, builds,
    statuses, snapshot, reset, the switches), :class:`~airflow_provider.emulator.state.apps.AppSide` (the
    emulated apps' health, behaviour, tracing and metrics) and
    :class:`~airflow_provider.emulator.state.request_log.RequestLog` (faults, the request log and counters),
    all standing on :class:`~airflow_provider.emulator.state.store.StateStore`.

    :param api_key: the key requests must send in ``X-Api-Key``.
    :param tenant_id: when set, the key is organization-scoped: every service request must name its
        workspace in ``X-Tenant-Id`` (403 otherwise) and sees only that tenant's deployments. It is also
        the tenant of seeded deployments that name none. Without it (a workspace-scoped key) requests
        need no tenant header; one that sends it is scoped to that tenant all the same.
    :param data: seed data: a JSON file path, its parsed content, or ``None`` for the shipped example
        data (250 deployments); ``{}`` for none.
    :param build_seconds: time from a revision's build start to ``DEPLOYED``.
    :param ready_seconds: time from a deployment's creation to ``READY`` (its first revision must be
        deployed too).
    :param optional_endpoints: serve the production-only ``GET /v2/deployments/{id}`` and
        ``GET /v2/deployments/{id}/revisions/{revision_id}`` (when false they answer 405 / 404).
    :param frozen_clock: time moves only through :meth:`~airflow_provider.emulator.state.admin.AdminSide.advance`.
    :param start_time: start of a frozen clock (default: now).
    :param path_prefix: path prefix of the service endpoints, e.g. ``/api-host`` (self-hosted style).
    :param resource_spec_mode: ``"replace"`` (production, default) or ``"merge"``; see the package docstring.
    :param disabled_endpoints: names from :data:`~airflow_provider.emulator.state.switches.OPTIONAL_ENDPOINTS` to
        answer as missing.
    :param redeploy_mode: ``"new_revision"`` (default) or ``"in_place"``; see the package docstring.
    :param revision_status_touches_deployment: whether a revision's status change (building, failed...)
        moves its deployment's ``updated_at`` (default). When false, only what the deployment itself shows
        does (a new latest or active revision, a status): a failed build then leaves the deployment record
        unchanged, which production may do too (it does not document it).
    :param updated_at_on_requests_only: when true, a deployment's ``updated_at`` moves only on a request that
        changes it (a PATCH, a redeploy), never as its revisions build and go live, as a service that stamps
        ``updated_at`` on writes only would (the spec does not say when it moves): the deployment then does not
        tell when its active revision went live (its revision's own ``updated_at`` does).
    :param unknown_fields: play a newer service whose answers carry fields the provider's models lack (see
        :mod:`airflow_provider.emulator.unknown_fields`); default off.
    """
