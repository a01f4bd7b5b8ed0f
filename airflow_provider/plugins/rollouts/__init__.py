"""The Rollouts view: deployments, their revisions and the rollouts that put them there, in the Airflow UI.

- :mod:`~airflow_provider.plugins.rollouts.plugin`: the ``AirflowPlugin`` (light: loaded everywhere);
- :mod:`~airflow_provider.plugins.rollouts.app`: the FastAPI app the API server mounts (pages, assets, JSON);
- :mod:`~airflow_provider.plugins.rollouts.paths`: where the view is mounted and the UI paths it links to;
- :mod:`~airflow_provider.plugins.rollouts.access`: who may see what (the API server's auth manager);
- :mod:`~airflow_provider.plugins.rollouts.listing`: deployments and revisions through the hook, cached;
- :mod:`~airflow_provider.plugins.rollouts.metadata`: Airflow's own records in its metadata database (asset events,
  task state, XCom);
- :mod:`~airflow_provider.plugins.rollouts.shapes`: the JSON the pages get (never a secret);
- :mod:`~airflow_provider.plugins.rollouts.charts`: the measurement charts' data (each check over its rounds);
- :mod:`~airflow_provider.plugins.rollouts.actions`: what a person can do from the view (roll back, approve),
  authorised by the auth manager, carried out by Airflow, in its audit log;
- :mod:`~airflow_provider.plugins.rollouts.rollback_dag`: the DAG that carries out a rollback from the view;
- ``static/``: the pages (plain HTML, JavaScript and CSS: no build step), one script per page (``list.js``,
  ``deployment.js``, ``fleet.js``) over the shared ``widgets.js`` and ``charts.js``, loaded in order by
  ``page.html``, and ``rollouts.js``, which starts the page.
"""
