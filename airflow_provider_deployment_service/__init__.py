"""Alias of :mod:`airflow_provider` under the distribution's own name.

Airflow 3.3 derives a provider's module from its distribution name when it looks for provider example
DAGs (``load_examples = True``, the default) and logs an error with a traceback when that import fails.
This empty package lets the lookup succeed; the provider itself lives in :mod:`airflow_provider`.
"""
