"""The statistical checks' tests: the evidence (:mod:`.evidence`, always-valid mixture tests), the judge of each
statistical check round by round (:mod:`.sequential_judge`), the drift guard (:mod:`.drift`), the projection of the
runs a decision still needs (:mod:`.projection`) and a fleet canary's control group (:mod:`.control`). Pure: no I/O,
no Airflow.
"""
