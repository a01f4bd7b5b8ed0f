"""The patch task's steps, bases of :class:`~airflow_provider.operators.patch.PatchDeploymentOperator`, one module
per concern:

- :mod:`~airflow_provider.tasks.patch.retry`: the patch task's ``task_state_store`` record, and what a retry of it
  reattaches to (an earlier try's patch or rollback, recorded or recognised on the service);
- :mod:`~airflow_provider.tasks.patch.judging` and :mod:`~airflow_provider.tasks.patch.rollback`: its steps once its
  revision is live (verify, the analysis, the bake; the automatic rollback and a retry's earlier rollback or
  verdict); :mod:`~airflow_provider.tasks.patch.verdict`: the verdict they record and what the task says;
- :mod:`~airflow_provider.tasks.patch.asking`: the question when its analysis is inconclusive;
  :mod:`~airflow_provider.tasks.patch.killed`: the revision rolled back when Airflow kills the task while it judges.

A family of the task layer: it uses what every task shares (:mod:`airflow_provider.tasks`, the rollback step
:mod:`airflow_provider.tasks.rollback` included), never the fleet's modules.
"""
