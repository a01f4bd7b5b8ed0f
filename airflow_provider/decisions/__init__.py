"""The pure rules of a rollout: decisions made from what the service and the tasks' records say, with no HTTP, no
Airflow and no I/O (each module imports the models, the provider's assets and defaults, and its siblings only).

- :mod:`~airflow_provider.decisions.rollout`: the rollout verdict (a revision going live, failing, or still on its
  way) shared by the sensor, the operators and the triggers;
- :mod:`~airflow_provider.decisions.patch_rules` and :mod:`~airflow_provider.decisions.spec_changes`: the production
  PATCH rules checked before sending, and what a rollout changed in a ``resource_spec`` (what restoring it sends);
- :mod:`~airflow_provider.decisions.fleet_strategy` and :mod:`~airflow_provider.decisions.fleet_progress`: a fleet
  rollout's strategy (its arguments, waves and failure allowance) and its progress (watching a wave, the result
  table, what stops the rollout);
- :mod:`~airflow_provider.decisions.record` and :mod:`~airflow_provider.decisions.dora`: the record of what each task
  did to each revision, and the DORA figures computed from it;
- :mod:`~airflow_provider.decisions.judging_marker` and :mod:`~airflow_provider.decisions.settling`: what a
  deployment watcher knows of the rollouts judging a revision, and when it may announce one.

Nothing is imported here: a DAG file that builds a fleet operator loads the strategy module alone.
"""
