"""Apache Airflow provider for the Deployment Management Service.

Kept deliberately light: Airflow imports every provider package on start-up.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
