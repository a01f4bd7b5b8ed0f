"""``make demo`` is the README's first command: its rollout part runs here end to end, as a user runs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT


def test_demo_rolls_out_and_reports_what_landed(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AIRFLOW", "DEPLOYMENT_SERVICE"))}
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "demo.py")],
        env={**env, "DEMO_WORK_DIR": str(tmp_path / "demo")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    # No error text for what the provider handles (issue 39): a deployment without an Airflow asset, a trigger run
    # inline by dag.test().
    for noise in ("Server returned error", "has no attribute 'asend'", "cannot see this task judge"):
        assert noise not in out + result.stderr, noise
    assert "ok checkout-api-staging: 1 new revision" in out
    assert "registry.example.com/acme/checkout-api:2.0.0" in out
    assert "RESULT: every rollout landed or was rolled back as expected" in out
    assert "2.1.0 went live unhealthy, failed its smoke test and was rolled back; 2 new revisions" in out
    assert "at the end it serves registry.example.com/acme/checkout-api:2.0.0" in out
    # A release that goes live READY but fails 20% of its runs: its tracing project fails the analysis.
    analysed = "2.2.0 went live READY but failed 20% of its runs: its tracing project failed the analysis and it was"
    assert f"ok checkout-api-staging: {analysed} rolled back; 2 new revisions" in out
    # floor(k * 0.2) errors in the first k runs: 0.200 when k is a multiple of 5, a little less otherwise.
    assert re.search(r"its tracing project while it served: error_rate 0\.(1[6-9]|20)\d over \d+ runs", out), out
    measured = r"Analysis round 1/\d: tracing error_rate on 'checkout-api-staging' = 0\.(1[6-9]|20)\d, needs < 0\.05"
    assert re.search(measured + r" -> failed", out), out[-3000:]
    # A release that lands, is handed to its guard and regresses seconds later: rolled back by the guard's DAG.
    guarded = (
        r"ok search-sandbox: 0\.5\.0 landed, then regressed: rolled back by the guard, [0-9a-z ]+ after landing, errors"
    )
    assert re.search(guarded + r" 0\.\d+ \(needs < 0\.05\); 2 new revisions; at the end it serves \S+:0\.4\.1", out), (
        out
    )
    analysis_log = (tmp_path / "demo" / "logs" / "analysed_rollout.log").read_text()
    assert "the analysis failed" in analysis_log and "rolled back" in analysis_log
    assert "demo-api-key-not-a-real-secret" not in analysis_log
    unhealthy = (tmp_path / "demo" / "logs" / "rollout_after_build-unhealthy.log").read_text()
    assert "failed its smoke test and was rolled back" in unhealthy
    assert "demo-payment-token-masked-in-logs" not in unhealthy
    assert "watcher fired revision_live: checkout-api-staging now serves revision" in out
    assert "The Rollouts view" in out and "<airflow>/plugin/rollouts: `python scripts/demo.py --serve`" in out
    assert "demo-payment-token-masked-in-logs" not in out
    logs = (tmp_path / "demo" / "logs" / "rollout_after_build.log").read_text()
    assert "demo-payment-token-masked-in-logs" not in logs
    assert "demo-api-key-not-a-real-secret" not in logs
    # An LLM application's release that serves without a single error but whose answers the online evaluator
    # scores worse: the quality gate (quality_gated_rollout) measures the scores and rolls it back.
    assert_the_quality_gate_rolled_back_a_worse_answering_release(out, tmp_path / "demo" / "logs")


def assert_the_quality_gate_rolled_back_a_worse_answering_release(out: str, logs: Path) -> None:
    """What the demo printed and left behind for ``quality_gated_rollout`` (issue 31): the scores the preflight
    and the rounds measured, the verdict, and the emulator's real state at the end."""
    story = (
        "0.5.0 went live READY and answered every run without an error, but the online evaluator's correctness "
        "score of its answers dropped: the quality gate rolled it back; 2 new revisions"
    )
    assert f"ok support-bot-dev: {story}" in out, out[-3000:]
    assert "at the end it serves registry.example.com/acme/support-bot:0.4.0" in out
    assert re.search(
        r"Preflight: correctness on 'support-bot-dev' \(serving revision [0-9a-f-]+\) = 0\.(89\d|90\d) -> passed", out
    )
    scored = r"Analysis round 1/\d: correctness on 'support-bot-dev' = 0\.5[45]\d, needs >= baseline - 0\.05 -> failed"
    assert re.search(scored, out), out[-3000:]
    assert "harm shown: evidence of a score worse than 0.85" in out  # the sequential test, not a point mean
    assert re.search(r"Analysis round 1/\d: errors on 'support-bot-dev' = 0\.000, needs error rate below 2x", out)
    served = r"its tracing project while it served: error_rate 0\.000 over \d+ runs, correctness mean 0\.5[45]\d"
    assert re.search(served, out), out[-3000:]
    baseline = r"in the minute up to the patch \(the baseline\): error_rate 0\.000 .* correctness mean 0\.(89\d|90\d)"
    assert re.search(baseline, out)
    assert re.search(
        r"since the rollback \(revision [0-9a-f]{8} serving again\): .* correctness mean 0\.\d{3} over", out
    )
    assert "Preflight: the analysis cannot decide" not in out  # the baseline holds what the tests need
    log = (logs / "quality_gated_rollout.log").read_text()
    assert "check 'correctness' failed" in log and "rolled back to revision" in log
    assert "demo-api-key-not-a-real-secret" not in log
    # The emulator's own state at the end: the worse revision was live, and the one before serves again.
    state = json.loads((logs / "emulator-state.json").read_text())
    [bot] = [deployment for deployment in state["deployments"] if deployment["name"] == "support-bot-dev"]
    *_, worse, restored = bot["revisions"]
    assert worse["source_revision_config"]["image_uri"] == "registry.example.com/acme/support-bot:0.5.0"
    assert bot["active_revision_id"] == restored["id"] == bot["latest_revision_id"] and bot["status"] == "READY"
    assert bot["source_revision_config"]["image_uri"] == "registry.example.com/acme/support-bot:0.4.0"
