"""Private: what every task of this provider shares, and one folder per task family (not a public API; import
tasks from their modules).

What every task shares, one module per concern:

- :mod:`~airflow_provider.tasks.base`: the connection arguments declared once, the cached hook, argument
  checks and the default intervals. Imported by operators, sensors and triggers.
- :mod:`~airflow_provider.tasks.targets`: which deployment a task targets; :mod:`~airflow_provider.tasks.deferral`:
  Airflow's own deferral timeout, as a resumed task sees it.
- :mod:`~airflow_provider.tasks.waiting`: waiting for a rollout on a worker or in the triggerer, and
  reading the trigger's event. Imported by operators and sensors. :mod:`~airflow_provider.tasks.build_logs`: why
  a build failed, in the task log.
- :mod:`~airflow_provider.tasks.request`: a patch request built from a task's arguments (secret values
  resolved and masked, rendered values checked, validated before any request), and completed against the
  deployment it goes to (one ``complete_request`` for the patch task and each deployment of a fleet). Imported
  by the patch, rollback and fleet operators.
- :mod:`~airflow_provider.tasks.analysis`, :mod:`~airflow_provider.tasks.preflight` and
  :mod:`~airflow_provider.tasks.dry_run`: analysis gates on the task side.
- :mod:`~airflow_provider.tasks.recording`: writing the record of what a task did to each revision, and
  :mod:`~airflow_provider.tasks.publishing`: telling the deployment watchers (the judging marker);
  :mod:`~airflow_provider.tasks.events`: the asset events of a revision that landed.
- :mod:`~airflow_provider.tasks.notify`: telling people (``notify={...}``); :mod:`~airflow_provider.tasks.inconclusive`:
  asking a person when an analysis is inconclusive.
- :mod:`~airflow_provider.tasks.execution_timeout`: Airflow's ``execution_timeout`` checked against what a task must
  wait, and what its ``on_kill`` shares; :mod:`~airflow_provider.tasks.plan_only`: a rollout's plan, nothing sent
  (``plan_only=True``).
- :mod:`~airflow_provider.tasks.rollback`: rolling a deployment back (start it, reattach a retry to it),
  re-exported from one module per part: a step the rollback task is made of, and the patch and fleet tasks take.

The families, one folder each:

- :mod:`~airflow_provider.tasks.patch`: the patch task's steps, one module per concern (its record and what a
  retry reattaches to, judging its live revision, the automatic rollback, the verdict, the question when its
  analysis is inconclusive), bases of the patch operator. Imported by the patch operator.
- :mod:`~airflow_provider.tasks.fleet`: the fleet task's worker side, one module per concern (the targets, the
  change, the progress record, patching, watching, analysing and rolling back a wave, the wave loop, what the
  task reports, its arguments' checks). Imported by the fleet operator.

A family uses what every task shares (the modules above, the rollback step included), never another family, and
what every task shares uses no family (``tests/test_layering.py``). Operators and sensors are siblings over this
package: neither imports the other.
"""
