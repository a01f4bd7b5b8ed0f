"""The production PATCH contract, as the emulator enforces it, one module per part:

- :mod:`~airflow_provider.emulator.contract.schema`: the ``PATCH /v2/deployments/{id}`` body checked at the
  schema level (422);
- :mod:`~airflow_provider.emulator.contract.rules`: the rules that depend on the deployment (400);
- :mod:`~airflow_provider.emulator.contract.merge`: a PATCH merged field by field into the stored models.

Written independently of the provider's request models, so that a test running the provider's client against
the emulator really tests the client's validation. A newer service's fields are
:mod:`~airflow_provider.emulator.unknown_fields`.
"""
