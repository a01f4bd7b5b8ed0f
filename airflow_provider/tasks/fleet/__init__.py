"""The fleet task's worker side (:class:`~airflow_provider.operators.fleet.FleetRolloutOperator`), one module per
concern:

- :mod:`~airflow_provider.tasks.fleet.plan`: the targets, resolved when the task runs
  (:func:`resolve_targets`), and deployments read 100 to a request (:func:`read_deployments`);
- :mod:`~airflow_provider.tasks.fleet.change`: what is sent, the change as each deployment's patch, its digest
  and each patch's fingerprint (completing a patch against its deployment is shared with the patch task:
  :func:`complete_request`, in :mod:`~airflow_provider.tasks.request`);
- :mod:`~airflow_provider.tasks.fleet.progress`: the progress record in ``context["task_state_store"]``
  (:class:`ProgressStore`, :class:`RollbackRecords`, :func:`new_progress`) and what it decides;
- :mod:`~airflow_provider.tasks.fleet.patching`: patching a wave (:func:`patch_wave`), and
  :mod:`~airflow_provider.tasks.fleet.retry`: what a retry finds of an earlier try's patch;
- :mod:`~airflow_provider.tasks.fleet.watching`: watching a wave on the worker (:func:`watch_wave`), its
  outcomes and failed builds, and ``verify`` (:func:`verify_wave`);
- :mod:`~airflow_provider.tasks.fleet.rollback`: rolling a wave back (:func:`start_rollbacks`,
  :func:`apply_rollbacks`);
- :mod:`~airflow_provider.tasks.fleet.analysis`: a wave's analysis; :mod:`~airflow_provider.tasks.fleet.waves`:
  the rollout wave by wave, each phase recorded before the next; :mod:`~airflow_provider.tasks.fleet.result`:
  the plan, the summary and the asset events, as the task reports them;
- :mod:`~airflow_provider.tasks.fleet.arguments`: the operator's arguments, checked when the DAG is parsed;
  :mod:`~airflow_provider.tasks.fleet.asking`: the question when a wave's analysis is inconclusive;
  :mod:`~airflow_provider.tasks.fleet.notify`: the notifications; :mod:`~airflow_provider.tasks.fleet.abort`:
  an abort asked from the Rollouts view; :mod:`~airflow_provider.tasks.fleet.killed`: the wave under way rolled
  back when Airflow kills the task on the worker.

The planning itself (waves, budget, the result table) is pure and lives in
:mod:`airflow_provider.decisions.fleet_progress`; waiting in the triggerer is
:class:`~airflow_provider.triggers.fleet.FleetWaveTrigger`. Everything here runs on a worker: the callables a user gives
(the per-deployment patch, ``verify``) cannot travel to the triggerer.

A family of the task layer: it uses what every task shares (:mod:`airflow_provider.tasks`, the rollback step
:mod:`airflow_provider.tasks.rollback` included), never the patch task's modules. Nothing is imported here: a DAG
file that imports the fleet operator loads only the modules it checks its arguments with.
"""
