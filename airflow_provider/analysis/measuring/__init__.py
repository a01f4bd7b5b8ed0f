"""The measuring side of analysis gates: where each source lives (:mod:`.endpoints`), how each check kind is
measured (:mod:`.sources`), the rounds of an analysis (:mod:`.run`) and its preflight (:mod:`.preflight`); the
definitions and verdict rules it measures for are the pure side, one floor up (``airflow_provider.analysis``).
"""
