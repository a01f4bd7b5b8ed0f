"""Airflow plugins of the provider: the Rollouts view (:mod:`airflow_provider.plugins.rollouts`).

Kept empty: Airflow imports plugin modules in every component (the task runner too), so nothing heavy
may be imported on the way to the plugin class.
"""
