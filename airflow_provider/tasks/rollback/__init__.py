"""Rolling a deployment back to an earlier revision: the decision and the request, not the wait.

The rollback's public entry points, importable from here; each part lives in a module of its own:

- :mod:`~airflow_provider.tasks.rollback.start`: :func:`start_rollback`, which path and its one request;
- :mod:`~airflow_provider.tasks.rollback.evidence`: what a retry finds of an earlier try's rollback
  (:func:`reattach_recorded_rollback`, :func:`find_earlier_rollback`);
- :mod:`~airflow_provider.tasks.rollback.outcome`: what a rollback did or is about to do, as recorded
  (:class:`RollbackStarted`, :class:`RollbackIntent`), and the ``not_restored`` clauses;
- :mod:`~airflow_provider.tasks.rollback.inputs`: what it is given to restore, checked before any request, and
  the snapshot a patch takes before it changes anything (:func:`revision_config_snapshot`);
- :mod:`~airflow_provider.tasks.rollback.revisions`: a deployment's revisions as a rollback reads them;
- :mod:`~airflow_provider.tasks.rollback.previous`: which revision served before the one serving now
  (``RollbackDeploymentOperator(revision_id="previous")``).

A step shared by the task families, beside the task base: the rollback task is this step, and the patch and
fleet tasks (:mod:`airflow_provider.tasks.patch`, :mod:`airflow_provider.tasks.fleet`) take it when a revision
fails. It uses only what every task shares, never a family.

One non-blocking step, :func:`start_rollback`, shared by :class:`RollbackDeploymentOperator`, the patch
operator's automatic rollback and fleet rollouts (one call per deployment). It checks everything it can
before sending anything, sends at most one request, and returns :class:`RollbackStarted`: which path was
used, the revision to wait for, the deployment after the request and what the rollback did not restore
(``RollbackStarted.not_restored``). The caller waits (a task with ``_wait``, a fleet through its
trigger).

What a rollback restores:

- **the build**: the revision's build (``redeploy``, exact, commit included), or its non-secret
  ``source_revision_config`` patched back (an image or a tag is exact; a branch ``repo_ref`` rebuilds the
  branch's current head, named in ``not_restored``);
- **the resource_spec**, when the caller gives the one that served with the revision (``resource_spec=``,
  recorded before the change), and only what the change being rolled back changed in it
  (``resource_spec_fields=``; unknown: every field the deployment no longer shows as it was, those the service
  added aside; see :mod:`airflow_provider.decisions.spec_changes`). Production replaces ``resource_spec`` whole and
  makes a revision for it, so when a changed field differs, the rollback patches the config and the whole
  ``resource_spec`` as the deployment shows it now, the changed fields set back, back in **one** PATCH (one
  revision; a redeploy is not known to restore it). Fields this provider does not know (the service's, at any
  depth) go back untouched: never a reason to refuse. A change that left ``resource_spec`` alone sends none.
  When it is not given, the rollback leaves ``resource_spec`` alone and says so in ``not_restored`` unless the
  deployment shows none (``external_docker`` only has one);
- **never the secrets**: their values are not kept. A caller that knows which secrets its change set adds
  its own clause.

Which path:

1. **redeploy** (``POST .../revisions/{revision_id}/redeploy``) where the service has it and no
   ``resource_spec`` needs restoring: the same build, commit included (exact). Never sent twice (see
   ``DeploymentServiceClient.redeploy_revision``). Production does not document whether a redeploy makes a
   revision: when ``latest_revision_id`` did not move, the revision redeployed is the one to wait for
   (active again), with the newer latest allowed to stay (``RollbackStarted.allowed_latest_revision_id``),
   never the latest itself (it serves the bad build).
2. **patch** where the redeploy endpoint answers 404/405, a ``resource_spec`` is to be restored, or secrets
   are given (a redeploy carries no body): ``PATCH`` the revision's non-secret ``source_revision_config``
   back (and ``source_config.resource_spec``), the config read from the revision endpoint, else from the
   caller's ``fallback_config``. Never applied twice (see ``DeploymentServiceClient.patch_deployment``).
3. **none**: the revision asked for already serves and nothing newer exists, or the newer revision's build
   failed (it never went live), or it serves again although a newer revision went live (redeployed without a
   new revision), or it is being deployed again right now; and no ``resource_spec`` needs restoring.

A rollback refuses, naming both revisions, when ``latest_revision_id`` moved past the revision being rolled
back (someone else rolled out meanwhile), unless ``force``.

Retries (never a second rollback, never a claim that did not happen):

- With a ``task_state_store``, the caller records the rollback **before** sending it
  (``before_sending``, a :class:`RollbackIntent`) and again once sent (:meth:`RollbackStarted.record`).
  :func:`reattach_recorded_rollback` then decides a retry: a sent record is waited for; for an intent, the
  deployment's ``latest_revision_id`` still being the one recorded means the request did not land (it is
  sent now) unless the revision is active or being deployed again (a redeploy without a new revision); a
  latest that moved means the first revision after the recorded one is the rollback when it has the
  restored config, else the task fails saying what it saw.
- Without a record (Airflow < 3.3, or a record that could not be written), :func:`find_earlier_rollback`
  reattaches only on positive evidence; see its rule. Where the deployment cannot tell, it fails loudly,
  saying what it saw and what to check, rather than roll back a second time or claim a rollback.
"""

from __future__ import annotations

from airflow_provider.tasks.rollback.evidence import find_earlier_rollback, reattach_recorded_rollback
from airflow_provider.tasks.rollback.inputs import (
    checked_fallback_config,
    checked_resource_spec,
    revision_config_snapshot,
)
from airflow_provider.tasks.rollback.outcome import (
    RESOURCE_SPEC_NOT_SENT,
    RESOURCE_SPEC_NOT_SHOWN,
    RESOURCE_SPEC_UNKNOWN,
    RESOURCE_SPEC_VERDICTS,
    RollbackIntent,
    RollbackPath,
    RollbackStarted,
    is_branch_ref,
    recorded_fields,
)
from airflow_provider.tasks.rollback.start import NOT_BUILT, start_rollback

__all__ = [
    "NOT_BUILT",
    "RESOURCE_SPEC_NOT_SENT",
    "RESOURCE_SPEC_NOT_SHOWN",
    "RESOURCE_SPEC_UNKNOWN",
    "RESOURCE_SPEC_VERDICTS",
    "RollbackIntent",
    "RollbackPath",
    "RollbackStarted",
    "checked_fallback_config",
    "checked_resource_spec",
    "find_earlier_rollback",
    "is_branch_ref",
    "reattach_recorded_rollback",
    "recorded_fields",
    "revision_config_snapshot",
    "start_rollback",
]
