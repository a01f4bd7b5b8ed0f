"""Private: what every task of this provider shares (not a public API; import tasks from their modules).

- :mod:`~airflow_provider.tasks.base`: the connection arguments declared once, the cached hook, argument
  checks and the default intervals. Imported by operators, sensors and triggers.
- :mod:`~airflow_provider.tasks.waiting`: waiting for a rollout on a worker or in the triggerer, and
  reading the trigger's event. Imported by operators and sensors.
- :mod:`~airflow_provider.tasks.patch_request`: a patch request built from a task's arguments (secret values
  resolved and masked, rendered values checked, validated before any request), and completed against the
  deployment it goes to (one ``complete_request`` for the patch task and each deployment of a fleet). Imported
  by the patch, rollback and fleet operators.
- :mod:`~airflow_provider.tasks.patch`: the patch task's steps, one module per concern (its record and what a
  retry reattaches to, judging its live revision, the automatic rollback, the verdict, the question when its
  analysis is inconclusive), bases of the patch operator. Imported by the patch operator.
- :mod:`~airflow_provider.tasks.rollback`: rolling a deployment back (start it, reattach a retry to it),
  re-exported from one module per part. Imported by the rollback, patch and fleet tasks.
- :mod:`~airflow_provider.tasks.fleet`: the fleet task's worker side, one module per concern (the targets, the
  change, the progress record, patching, watching, analysing and rolling back a wave, the wave loop, what the
  task reports, its arguments' checks). Imported by the fleet operator.

Operators and sensors are siblings over this package: neither imports the other.
"""
