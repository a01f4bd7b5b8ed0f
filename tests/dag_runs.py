"""Running the example DAGs with ``dag.test()``: shared by the example-DAG and the reliability tests."""

from __future__ import annotations

from typing import Any

from tests.conftest import REPO_ROOT

DAGS = REPO_ROOT / "example_dags"


def load_dag(dag_id: str) -> Any:
    """The example DAG ``dag_id``, parsed from its file (import errors fail the test)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / f"{dag_id}.py"))
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag(dag_id)


def run_dag(dag_id: str, **conf: Any) -> tuple[str, dict[str, str]]:
    """Run the DAG once; return the run state and each task's state (mapped tasks as ``task[i]``)."""
    run = load_dag(dag_id).test(run_conf=conf or None)
    states = {}
    for ti in run.get_task_instances():
        name = ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"
        states[name] = str(ti.state)
    return str(run.state), states
