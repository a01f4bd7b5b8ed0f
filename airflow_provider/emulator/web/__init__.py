"""The emulator's HTTP side: the FastAPI app (:mod:`~airflow_provider.emulator.web.app`: the service endpoints),
the admin API under ``/_emulator`` (``admin_api``) and the middleware that
counts and logs service requests and injects faults (:mod:`~airflow_provider.emulator.web.middleware`), over the
emulator's state. The server (:mod:`airflow_provider.emulator.server`) runs the app.
"""
