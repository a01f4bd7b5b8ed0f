"""Private: what every task of this provider shares (not a public API; import tasks from their modules).

- :mod:`~airflow_provider.tasks.base`: the connection arguments declared once, the cached hook, argument
  checks and the default intervals. Imported by operators, sensors and triggers.
- :mod:`~airflow_provider.tasks.waiting`: waiting for a rollout on a worker or in the triggerer, and
  reading the trigger's event. Imported by operators and sensors.

Operators and sensors are siblings over this package: neither imports the other.
"""
