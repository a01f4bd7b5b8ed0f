"""The Rollouts view in a real browser: headless Chromium (Debian's ``chromium``, driven by Playwright, no
browser download) against a real ``airflow api-server`` with the provider installed and the emulator behind
the connection.

The test logs in through Airflow's login page, opens the Rollouts entry of the navigation (the emulator's
deployments appear), opens the Fleet rollout tab of a ``FleetRolloutOperator`` task that ``airflow dags
test`` runs meanwhile (``tests/plugins/dags/rollouts_view_fleet.py``: held until the browser is on the tab),
and watches the waves go from nothing to done without a reload; then the deployment list and a deployment's
page show that rollout. Then ``rollouts_view_rejected`` (``tests/plugins/dags/rollouts_view_rejected.py``) rolls a
revision out on the canary that its ``verify`` rejects and rolls itself back: the task fails (no asset event),
and its record credits every revision it touched, read the right way round; the DORA figures count both runs.
Requests without a user are refused.

Screenshots go to ``.e2e/rollouts-view/``; with ``ROLLOUTS_VIEW_SCREENSHOTS=docs/_static`` they also
replace the documentation's (``docs/_static/rollouts-view-*.png``).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.conftest import PRISTINE_DB, REPO_ROOT
from tests.e2e.e2e_airflow import Emulator, ManagedProcess, child_env, free_port, wait_until

# A real API server and a browser: make test runs this module after the rest of the suite, alone.
pytestmark = pytest.mark.alone

CHROMIUM = Path(os.environ.get("ROLLOUTS_VIEW_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = REPO_ROOT / ".e2e" / "rollouts-view"
SHOTS_ENV = "ROLLOUTS_VIEW_SCREENSHOTS"
DAG_ID = "rollouts_view_fleet"
REJECTED_DAG_ID = "rollouts_view_rejected"
ANALYSED_DAG_ID = "rollouts_view_analysed"
ANALYSED = "billing-worker-sandbox"
APPROVAL_DAG_ID = "rollouts_view_approval"
APPROVAL_FLEET = ("inventory-sync-dev", "inventory-sync-sandbox")
ABORT_DAG_ID = "rollouts_view_abort"
ABORT_FLEET = ("onboarding-flow-pr-107", "fraud-detector-pr-114", "ledger-service-pr-226")
CANARY = "checkout-api-dev"
FLEET = ["checkout-api-dev", "checkout-api-prod", "checkout-api-sandbox", "search-dev", "support-bot-staging"]
FLEET.append("support-bot-prod")
FAILING = "search-dev"
PASSWORDS = {"admin": secrets.token_urlsafe(12), "viewer": secrets.token_urlsafe(12)}
STEP_TIMEOUT = 60.0
"""Longest wait of any one step (the API server's start, the run's start, the rollout)."""
UI_TIMEOUT_MS = 15_000
"""Longest wait for one element of a page."""


@dataclass
class Stack:
    """The running services of the test."""

    base_url: str
    home: Path
    emulator: Emulator
    api: ManagedProcess
    dag_test: ManagedProcess
    go_file: Path
    timings: dict[str, float] = field(default_factory=dict)

    def diagnostics(self) -> str:
        return "\n".join(process.tail(30) for process in (self.api, self.dag_test, self.emulator.process))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The emulator, an API server on an empty database and ``airflow dags test`` of the fleet DAG (held at
    its first task), all started at once; stopped by process group at the end."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (`make .venv/.installed` does)")
    started = time.monotonic()
    home = tmp_path_factory.mktemp("rollouts-view-airflow")
    shutil.copyfile(PRISTINE_DB, home / "airflow.db")
    bin_dir = Path(sys.executable).parent
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    (home / "passwords.json").write_text(json.dumps(PASSWORDS))
    emulator = Emulator(bin_dir / "python", home, build_seconds=2.0, ready_seconds=0.5).__enter__()
    processes: list[ManagedProcess] = []
    try:
        env = child_env(bin_dir)
        env.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "tests" / "plugins" / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
                "AIRFLOW__API__BASE_URL": base_url,
                "AIRFLOW__API__PORT": str(port),
                "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(24),
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT": emulator.connection_json(),
                "ROLLOUTS_VIEW_GO_FILE": str(home / "go"),
                "ROLLOUTS_VIEW_POLL_INTERVAL": "0.3",
            }
        )
        emulator.fail_next_build(emulator.deployment(FAILING)["id"], f"compile error in {FAILING}")
        airflow = str(bin_dir / "airflow")
        api_command = [airflow, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        processes.append(ManagedProcess("api-server", api_command, env, home / "api-server.log", home).start())
        processes.append(ManagedProcess("dags-test", [airflow, "dags", "test", DAG_ID], env, home / "dags.log", home))
        processes[-1].start()
        running = Stack(base_url, home, emulator, processes[0], processes[1], home / "go")

        def healthy() -> bool:
            if not running.api.alive:
                raise AssertionError(f"the API server exited\n{running.api.tail(60)}")
            try:
                return httpx.get(f"{base_url}/api/v2/monitor/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(
            healthy, timeout=STEP_TIMEOUT, what="the API server answers", interval=0.2, diagnostics=running.diagnostics
        )
        running.timings["api server up"] = time.monotonic() - started
        yield running
    finally:
        stop_all([*processes, emulator.process])
        emulator.__exit__(None, None, None)


def stop_all(processes: list[ManagedProcess], grace: float = 2.0) -> None:
    """SIGTERM every process (and what it started) at once, wait up to ``grace`` seconds, SIGKILL the rest."""
    for process in processes:
        process.stopped = True
        process.signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        if process.wait_gone(max(0.0, deadline - time.monotonic())):
            process.signal_all(signal.SIGKILL)
            process.wait_gone(5.0)


# ------------------------------------------------------------------------------------------ helpers
def save_shot(page: Any, name: str, **options: Any) -> None:
    """A screenshot into ``.e2e/rollouts-view/`` (and the docs' ``_static`` when asked)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"rollouts-view-{name}.png"
    page.screenshot(path=str(path), **options)
    target = os.environ.get(SHOTS_ENV)
    if target:
        shutil.copyfile(path, (REPO_ROOT / target) / path.name)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium from Debian, driven by Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


def logged_in(browser: Any, stack: Stack, user: str) -> Any:
    """A page of a new browser context, logged in through Airflow's login page."""
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    page.goto(f"{stack.base_url}/")
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill(PASSWORDS[user])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/auth/login" not in url, timeout=UI_TIMEOUT_MS)
    return page


def view_frame(page: Any, name: str) -> Any:
    """The iframe in which the UI shows the view's page ``name`` (``Rollouts``, ``Fleet rollout``)."""
    page.locator(f"iframe[title='{name}']").wait_for()
    return page.frame_locator(f"iframe[title='{name}']")


def page_text(frame: Any) -> str:
    try:
        return str(frame.locator("body").inner_text(timeout=2000))[:2000]
    except Exception as err:  # the frame itself may be what failed
        return f"(could not read the page: {err})"


def api_token(stack: Stack) -> str:
    answer = httpx.post(
        f"{stack.base_url}/auth/token", json={"username": "admin", "password": PASSWORDS["admin"]}, timeout=10
    )
    assert answer.status_code == 201, f"POST /auth/token answered {answer.status_code}: {answer.text}"
    return str(answer.json()["access_token"])


def fleet_run_id(stack: Stack, token: str) -> str:
    """The run ``airflow dags test`` created (it exists a few seconds after the command starts)."""

    def created() -> str | None:
        if not stack.dag_test.alive and stack.dag_test.popen and stack.dag_test.popen.returncode:
            raise AssertionError(f"airflow dags test exited\n{stack.dag_test.tail(60)}")
        answer = httpx.get(
            f"{stack.base_url}/api/v2/dags/{DAG_ID}/dagRuns", headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        runs = answer.json().get("dag_runs", []) if answer.status_code == 200 else []
        return str(runs[0]["dag_run_id"]) if runs else None

    return wait_until(
        created, timeout=STEP_TIMEOUT, what="airflow dags test creates its run", diagnostics=stack.diagnostics
    )


def wave_states(frame: Any) -> tuple[tuple[str, str], ...]:
    states = frame.locator("[data-wave]").evaluate_all("els => els.map(e => [e.dataset.wave, e.dataset.waveState])")
    return tuple((str(name), str(state)) for name, state in states)


# ------------------------------------------------------------------------------------------ tests
def test_requests_without_a_user_are_refused(stack: Stack, browser: Any) -> None:
    for path in ("/deployment-service/api/deployments", "/deployment-service/deployments"):
        answer = httpx.get(f"{stack.base_url}{path}", timeout=10)
        assert answer.status_code == 401, f"{path}: {answer.status_code} {answer.text[:300]}"
    context = browser.new_context()
    try:
        page = context.new_page()
        response = page.goto(f"{stack.base_url}/deployment-service/deployments")
        assert response is not None and response.status == 401, page.content()[:500]
        assert "Not authenticated" in page.content()
    finally:
        context.close()


def test_a_viewer_without_access_to_the_connection_sees_the_refusal(stack: Stack, browser: Any) -> None:
    page = logged_in(browser, stack, "viewer")
    try:
        page.goto(f"{stack.base_url}/plugin/rollouts")
        frame = view_frame(page, "Rollouts")
        error = frame.locator("[data-error]")
        error.wait_for()
        assert "may not read connection 'deployment_service_default'" in error.inner_text(), page_text(frame)
        assert frame.locator("#deployments").count() == 0
    finally:
        page.context.close()


def test_the_fleet_tab_follows_the_rollout_and_the_pages_show_it(stack: Stack, browser: Any) -> None:
    page = logged_in(browser, stack, "admin")
    try:
        # The navigation entry: every deployment of the emulator.
        page.get_by_role("link", name="Rollouts").click()
        page.wait_for_url("**/plugin/rollouts**")
        frame = view_frame(page, "Rollouts")
        frame.locator("#deployments tr[data-deployment]").first.wait_for()
        shown = set(
            frame.locator("#deployments tr[data-deployment]").evaluate_all(
                "rows => rows.map(r => r.dataset.deployment)"
            )
        )
        served = {deployment["name"] for deployment in stack.emulator.deployments()}
        assert shown == served, f"missing: {sorted(served - shown)[:10]}; unexpected: {sorted(shown - served)[:10]}"

        # The fleet task's tab, opened before its first wave starts.
        run_id = fleet_run_id(stack, api_token(stack))
        tab = f"{stack.base_url}/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/tasks/roll_out/plugin/fleet-rollout"
        page.goto(tab)
        fleet = view_frame(page, "Fleet rollout")
        fleet.locator("#no-progress, [data-wave]").first.wait_for()
        frame_handle = page.locator("iframe[title='Fleet rollout']").element_handle()
        assert frame_handle is not None
        tab_frame = frame_handle.content_frame()
        tab_frame.evaluate("() => { window.rolloutsViewLoadedOnce = true; }")
        stack.go_file.write_text("go")

        seen: list[tuple[tuple[str, str], ...]] = []
        midway_shot = False

        def finished() -> bool:
            if not stack.dag_test.alive and stack.dag_test.popen and stack.dag_test.popen.returncode:
                raise AssertionError(f"airflow dags test failed\n{stack.dag_test.tail(80)}")
            states = wave_states(fleet)
            if not seen or seen[-1] != states:
                seen.append(states)
            nonlocal midway_shot
            done = [state == "done" for _, state in states]
            if states and any(done) and not all(done) and not midway_shot:
                save_shot(page, "fleet-running")
                midway_shot = True
            task_state = fleet.locator("h1 + [data-badge]").first.get_attribute("data-badge")
            return bool(states) and all(done) and task_state == "success"

        def what_the_tab_showed() -> str:
            return f"wave states seen: {seen}\nthe tab shows:\n{page_text(fleet)}\n{stack.diagnostics()}"

        wait_until(
            finished,
            timeout=STEP_TIMEOUT,
            what="the tab shows every wave done",
            interval=0.25,
            diagnostics=what_the_tab_showed,
        )
        assert tab_frame.evaluate("() => window.rolloutsViewLoadedOnce") is True, "the tab reloaded instead of updating"
        names = [name for name, _ in seen[-1]]
        assert names == ["canary", "wave 1", "wave 2", "wave 3"], seen[-1]
        assert midway_shot, f"never saw a wave done while another was not: {seen}"
        assert any(not states for states in seen[:1]) or seen[0] != seen[-1], seen

        outcomes = dict(
            fleet.locator("tr[data-row]").evaluate_all("rows => rows.map(r => [r.dataset.row, r.dataset.outcome])")
        )
        assert outcomes == {name: ("failed" if name == FAILING else "landed") for name in FLEET}, outcomes
        failed_row = fleet.locator(f"tr[data-row='{FAILING}']")
        assert "BUILD_FAILED" in failed_row.inner_text()
        assert "1 of 1 allowed" in fleet.locator("#fleet-summary").inner_text()
        for name in FLEET:  # what the tab says landed is what the service serves
            deployment = stack.emulator.deployment(name)
            to_revision = fleet.locator(f"tr[data-row='{name}'] td:nth-child(3) code").nth(1).get_attribute("title")
            if name == FAILING:
                assert deployment["active_revision_id"] != deployment["latest_revision_id"] == to_revision
            else:
                assert deployment["active_revision_id"] == deployment["latest_revision_id"] == to_revision, name
                assert deployment["source_revision_config"]["repo_ref"] == "v2.0.0", name
        save_shot(page, "fleet-done")

        # A rollout its verify rejects, rolled back by its own task, which fails.
        landed = stack.emulator.deployment(CANARY)["active_revision_id"]
        rejected_run = run_dag_test(stack, REJECTED_DAG_ID)
        after = stack.emulator.deployment(CANARY)
        rejected, restored = after["revisions"][-2]["id"], after["revisions"][-1]["id"]
        assert after["active_revision_id"] == restored and after["status"] == "READY"
        assert after["source_revision_config"]["repo_ref"] == "v2.0.0"  # the fleet's build serves again

        # The deployments list: the last rollout is the failed run; the connection's figures count both runs.
        page.goto(f"{stack.base_url}/plugin/rollouts/deployment-service/deployments?name_contains=checkout-api")
        frame = view_frame(page, "Rollouts")
        canary = frame.locator(f"tr[data-deployment='{CANARY}'] [data-last-rollout]")
        canary.wait_for()
        assert canary.get_attribute("data-last-rollout") == "rolled_back", page_text(frame)
        assert REJECTED_DAG_ID in canary.inner_text()
        figures = frame.locator("#dora")
        figures.wait_for()
        # checkout-api-dev twice (the fleet's landed, the rejected one), checkout-api-prod and -sandbox once
        assert figures.get_attribute("data-rollouts") == "4", page_text(frame)
        assert "Change failure rate" in figures.inner_text() and "25 %" in figures.inner_text(), figures.inner_text()
        save_shot(page, "deployments")

        # The canary's page: every revision a task made or rejected names its run, read the right way round.
        frame.get_by_role("link", name=CANARY, exact=True).click()
        frame.locator("#revisions [data-role='rejected']").first.wait_for()

        def roles(revision: str) -> list[tuple[str, str]]:
            marks = frame.locator(f"#revisions tr[data-revision='{revision}'] [data-role]")
            found = marks.evaluate_all("marks => marks.map(m => [m.dataset.role, m.dataset.run])")
            return [(str(role), str(run)) for role, run in found]

        assert roles(rejected) == [("rejected", rejected_run)], page_text(frame)
        assert roles(restored) == [("rollback_revision", rejected_run)], page_text(frame)
        assert roles(landed) == [("rolled_back_to", rejected_run), ("landed", run_id)], page_text(frame)
        shown = frame.locator(f"#revisions tr[data-revision='{rejected}']").inner_text()
        assert "rejected (verify failed)" in shown and "not by Airflow" not in shown, shown
        # "Roll back to this revision" on the rejected one: the confirmation says when, by which run and why, and
        # "Roll back" stays disabled until the second, explicit confirmation (issue 39); cancelled here.
        frame.locator(f"button[data-action='rollback'][data-revision='{rejected}']").click()
        warning = frame.locator("[data-confirmation='rollback'] [data-rejected='rollback']")
        warning.wait_for()
        said = warning.inner_text()
        assert "rejected (verify failed)" in said and rejected_run in said and REJECTED_DAG_ID in said, said
        assert frame.locator(f"[data-rejected-by='{rejected_run}']").count() == 1
        assert frame.locator("[data-confirm='rollback']").is_disabled()
        frame.locator("[data-acknowledge='rejected']").check()
        assert frame.locator("[data-confirm='rollback']").is_enabled()
        frame.locator("[data-cancel='rollback']").click()
        assert frame.locator("[data-confirmation='rollback']").count() == 0
        assert frame.locator("#dora").get_attribute("data-rollouts") == "2"
        assert "deployments/" in page.url, page.url  # the UI's address follows the view's page
        save_shot(page, "deployment", full_page=True)
        stack.timings["test"] = time.monotonic()
    finally:
        page.context.close()


def test_an_admin_rolls_back_from_the_view_and_a_viewer_may_not(stack: Stack, browser: Any) -> None:
    """An analysed rollout (its measurements charted on the deployment's page), then "Roll back to this revision"
    clicked by the admin: the view triggers ``deployment_service_rollback`` as the admin, a real scheduler runs it,
    the emulator serves the old build again, the audit log and the page name the admin. The viewer gets 403."""
    name = ANALYSED
    before = stack.emulator.deployment(name)
    analysed_run = run_dag_test(stack, ANALYSED_DAG_ID, timeout=STEP_TIMEOUT * 2)  # five rounds of analysis
    rolled_out = stack.emulator.deployment(name)
    old, new = before["active_revision_id"], rolled_out["active_revision_id"]
    assert new != old and rolled_out["source_revision_config"]["repo_ref"] == "v3.0.0", rolled_out
    token = api_token(stack)
    headers = {"Authorization": f"Bearer {token}"}
    scheduler = ManagedProcess(
        "scheduler",
        [str(Path(sys.executable).parent / "airflow"), "scheduler"],
        stack.dag_test.env,
        stack.home / "scheduler.log",
        stack.home,
    ).start()
    page = logged_in(browser, stack, "admin")
    try:
        page.goto(f"{stack.base_url}/plugin/rollouts/deployment-service/deployments/{rolled_out['id']}")
        frame = view_frame(page, "Rollouts")
        # the analysis that judged the new revision, charted under its rollout
        charts = frame.locator(f"#revisions tr[data-revision='{new}'] figure[data-chart]")
        charts.first.wait_for()
        assert charts.count() == 2, page_text(frame)
        latency = frame.locator(f"#revisions tr[data-revision='{new}'] figure[data-chart='p95 latency ms']")
        assert latency.locator("circle[data-verdict='passed']").count() == 5
        assert latency.locator("line[data-threshold='800']").count() == 1
        assert latency.locator("rect[data-round-verdict='passed']").count() == 5
        save_shot(page, "deployment-analysed", full_page=True)

        button = frame.locator(f"button[data-action='rollback'][data-revision='{old}']")
        button.wait_for()
        assert frame.locator(f"button[data-action='rollback'][data-revision='{new}']").count() == 0  # it serves
        button.click()
        confirmation = frame.locator("[data-confirmation='rollback']")
        confirmation.wait_for()
        text = confirmation.inner_text()
        assert name in text and old[:8] in text and new[:8] in text and "deployment_service_rollback" in text, text
        save_shot(page, "rollback-confirm")
        frame.locator("[data-confirm='rollback']").click()
        requested = frame.locator("[data-requested]")
        requested.wait_for()
        run_id = str(requested.get_attribute("data-requested"))
        assert run_id.startswith("rollouts_view__rollback__") and "requested by admin" in requested.inner_text()

        def restored() -> bool:
            if not scheduler.alive:
                raise AssertionError(f"the scheduler exited\n{scheduler.tail(60)}")
            served = stack.emulator.deployment(name)
            return (
                served["active_revision_id"] != new
                and served["source_revision_config"]["repo_ref"] == before["source_revision_config"]["repo_ref"]
                and served["status"] == "READY"
            )

        wait_until(
            restored,
            timeout=STEP_TIMEOUT * 2,
            what="the scheduler runs the view's rollback",
            interval=0.5,
            diagnostics=lambda: f"{scheduler.tail(60)}\n{stack.diagnostics()}",
        )
        served = stack.emulator.deployment(name)
        assert len(served["revisions"]) == len(rolled_out["revisions"]) + 1, served["revisions"]  # one rollback
        state = httpx.get(
            f"{stack.base_url}/api/v2/dags/deployment_service_rollback/dagRuns/{run_id}", headers=headers, timeout=10
        ).json()
        assert state["triggering_user_name"] == "admin", state
        logs = httpx.get(
            f"{stack.base_url}/api/v2/eventLogs",
            params={"event": "deployment_service.rollback"},
            headers=headers,
            timeout=10,
        ).json()["event_logs"]
        assert [(log["owner"], log["run_id"]) for log in logs] == [("admin", run_id)], logs

        mark = frame.locator(f"#revisions tr[data-revision='{old}'] [data-run='{run_id}'] [data-by='admin']")
        mark.wait_for(timeout=STEP_TIMEOUT * 1000)
        assert "by admin from the Rollouts view" in mark.inner_text()
        save_shot(page, "deployment-rolled-back", full_page=True)
        assert analysed_run
    finally:
        page.context.close()
        stop_all([scheduler])

    viewer = logged_in(browser, stack, "viewer")
    try:
        viewer.goto(f"{stack.base_url}/plugin/rollouts/deployment-service/deployments/{rolled_out['id']}")
        frame = view_frame(viewer, "Rollouts")
        frame.locator("[data-error]").wait_for()
        assert frame.locator("button[data-action='rollback']").count() == 0
    finally:
        viewer.context.close()
    answer = httpx.post(
        f"{stack.base_url}/auth/token", json={"username": "viewer", "password": PASSWORDS["viewer"]}, timeout=10
    )
    viewer_token = answer.json()["access_token"]
    refused = httpx.post(
        f"{stack.base_url}/deployment-service/api/deployments/{rolled_out['id']}/rollback",
        json={"conn_id": "deployment_service_default", "revision_id": new, "request_id": "viewer-request-0001"},
        headers={"Authorization": f"Bearer {viewer_token}"},
        timeout=10,
    )
    assert refused.status_code == 403, refused.text


def test_an_admin_approves_a_fleet_rollout_from_its_tab_and_a_viewer_may_not(stack: Stack, browser: Any) -> None:
    """``rollouts_view_approval`` waits at its approval gate; the viewer sees the question without a button and gets
    403; the admin clicks Approve in the fleet tab, Airflow resumes the run, the fleet rolls out, and the audit log
    and the tab name the admin."""
    airflow = str(Path(sys.executable).parent / "airflow")
    home, env = stack.home, stack.dag_test.env
    process = ManagedProcess("approval", [airflow, "dags", "test", APPROVAL_DAG_ID], env, home / "approval.log", home)
    process.start()
    headers = {"Authorization": f"Bearer {api_token(stack)}"}
    base = f"{stack.base_url}/api/v2/dags/{APPROVAL_DAG_ID}/dagRuns"
    try:

        def asking() -> str | None:
            if not process.alive:
                raise AssertionError(f"airflow dags test {APPROVAL_DAG_ID} exited\n{process.tail(60)}")
            runs = httpx.get(base, headers=headers, timeout=10).json().get("dag_runs", [])
            if not runs:
                return None
            run = str(runs[0]["dag_run_id"])
            ti = httpx.get(f"{base}/{quote(run, safe='')}/taskInstances/approve_rollout", headers=headers, timeout=10)
            return run if ti.status_code == 200 and ti.json().get("state") == "awaiting_input" else None

        run_id = wait_until(
            asking,
            timeout=STEP_TIMEOUT * 2,
            what="the approval gate asks",
            interval=0.5,
            diagnostics=lambda: process.tail(60),
        )
        tab = (
            f"{stack.base_url}/dags/{APPROVAL_DAG_ID}/runs/{quote(run_id, safe='')}/tasks/roll_out/plugin/fleet-rollout"
        )

        viewer = logged_in(browser, stack, "viewer")
        try:
            viewer.goto(tab)
            frame = view_frame(viewer, "Fleet rollout")
            frame.locator("tr[data-approval='approve_rollout']").wait_for()
            assert frame.locator("button[data-answer]").count() == 0, page_text(frame)
        finally:
            viewer.context.close()
        viewer_token = httpx.post(
            f"{stack.base_url}/auth/token", json={"username": "viewer", "password": PASSWORDS["viewer"]}, timeout=10
        ).json()["access_token"]
        body = {"dag_id": APPROVAL_DAG_ID, "run_id": run_id, "task_id": "approve_rollout", "option": "Approve"}
        refused = httpx.post(
            f"{stack.base_url}/deployment-service/api/approvals",
            json=body,
            headers={"Authorization": f"Bearer {viewer_token}"},
            timeout=10,
        )
        assert refused.status_code == 403, refused.text

        page = logged_in(browser, stack, "admin")
        try:
            page.goto(tab)
            frame = view_frame(page, "Fleet rollout")
            frame.locator("tr[data-approval='approve_rollout'] button[data-answer='Approve']").click()
            confirmation = frame.locator("[data-confirmation='answer']")
            confirmation.wait_for()
            assert "approve_rollout" in confirmation.inner_text() and run_id in confirmation.inner_text()
            save_shot(page, "fleet-approval")
            frame.locator("[data-confirm='answer']").click()
            answered = frame.locator("[data-answered]")
            answered.wait_for()
            assert "admin answered" in answered.inner_text(), answered.inner_text()
            wait_until(
                lambda: not process.alive,
                timeout=STEP_TIMEOUT * 2,
                what="the approved run ends",
                interval=0.5,
                diagnostics=lambda: process.tail(60),
            )
            for name in APPROVAL_FLEET:
                served = stack.emulator.deployment(name)
                assert served["source_revision_config"]["repo_ref"] == "v5.0.0", served
                assert served["active_revision_id"] == served["latest_revision_id"], served
            page.reload()
            frame = view_frame(page, "Fleet rollout")
            row = frame.locator("tr[data-approval='approve_rollout']")
            row.wait_for()
            assert "admin" in row.inner_text() and "Approve" in row.inner_text(), row.inner_text()
        finally:
            page.context.close()
        logs = httpx.get(
            f"{stack.base_url}/api/v2/eventLogs",
            params={"event": "deployment_service.approval"},
            headers=headers,
            timeout=10,
        ).json()["event_logs"]
        assert [(log["owner"], log["run_id"], log["task_id"]) for log in logs] == [("admin", run_id, "approve_rollout")]
    finally:
        stop_all([process])


def test_an_admin_aborts_a_running_fleet_rollout_from_its_tab_and_a_viewer_may_not(stack: Stack, browser: Any) -> None:
    """``rollouts_view_abort`` runs; while its wave 1 bakes the viewer sees no Abort button, the admin clicks Abort,
    picks "roll back the current wave, the canary and every earlier wave", confirms; the running task rolls both
    waves back and fails, the last deployment is never patched, and the tab names the admin."""
    airflow = str(Path(sys.executable).parent / "airflow")
    home, env = stack.home, stack.dag_test.env
    process = ManagedProcess("abort", [airflow, "dags", "test", ABORT_DAG_ID], env, home / "abort.log", home)
    process.start()
    before = {name: stack.emulator.deployment(name)["active_revision_id"] for name in ABORT_FLEET}
    headers = {"Authorization": f"Bearer {api_token(stack)}"}
    base = f"{stack.base_url}/api/v2/dags/{ABORT_DAG_ID}/dagRuns"
    try:

        def wave_one_patched() -> str | None:
            if not process.alive:
                raise AssertionError(f"airflow dags test {ABORT_DAG_ID} exited\n{process.tail(60)}")
            runs = httpx.get(base, headers=headers, timeout=10).json().get("dag_runs", [])
            if not runs:
                return None
            run = str(runs[0]["dag_run_id"])
            key = {"dag_id": ABORT_DAG_ID, "run_id": run, "task_id": "roll_out"}
            shown = httpx.get(f"{stack.base_url}/deployment-service/api/fleet", params=key, headers=headers, timeout=10)
            waves = shown.json().get("waves") or [] if shown.status_code == 200 else []
            return run if len(waves) > 1 and any(row.get("to_revision") for row in waves[1]["rows"]) else None

        run_id = wait_until(
            wave_one_patched,
            timeout=STEP_TIMEOUT * 2,
            what="wave 1 of the fleet is patched",
            interval=0.3,
            diagnostics=lambda: process.tail(60),
        )
        tab = f"{stack.base_url}/dags/{ABORT_DAG_ID}/runs/{quote(run_id, safe='')}/tasks/roll_out/plugin/fleet-rollout"
        viewer = logged_in(browser, stack, "viewer")
        try:
            viewer.goto(tab)
            frame = view_frame(viewer, "Fleet rollout")
            frame.locator("[data-wave]").first.wait_for()
            assert frame.locator("#abort").count() == 0, page_text(frame)
        finally:
            viewer.context.close()

        page = logged_in(browser, stack, "admin")
        try:
            page.goto(tab)
            frame = view_frame(page, "Fleet rollout")
            frame.locator("#abort").click()
            confirmation = frame.locator("[data-confirmation='abort']")
            confirmation.wait_for()
            text = confirmation.inner_text()
            assert all(name in text for name in ABORT_FLEET), text  # rolled back / not started, by name
            confirmation.locator("input[value='rollback+earlier']").check()
            save_shot(page, "fleet-abort")
            frame.locator("[data-confirm='abort']").click()
            requested = frame.locator("[data-abort-requested]")
            requested.wait_for()
            assert "admin asked the task to abort" in requested.inner_text(), requested.inner_text()
            wait_until(
                lambda: not process.alive,
                timeout=STEP_TIMEOUT * 2,
                what="the aborted run ends",
                interval=0.5,
                diagnostics=lambda: process.tail(60),
            )
            # Every deployment patched (the canary and wave 1, and wave 2 when the clicks came after it started: the
            # browser is slower than wave 1's bake on a busy machine) is rolled back: none serves the new build.
            for name in ABORT_FLEET:
                served = stack.emulator.deployment(name)
                assert served["source_revision_config"]["repo_ref"] != "v9.9.9", served
                assert served["active_revision_id"] == served["latest_revision_id"], served
                if name in ABORT_FLEET[:2]:  # patched before the abort for sure: a rollback's revision serves
                    assert served["active_revision_id"] != before[name], served
            page.reload()
            frame = view_frame(page, "Fleet rollout")
            aborted = frame.locator("#aborted")
            aborted.wait_for()
            assert "Aborted by admin from the Rollouts view" in aborted.inner_text(), aborted.inner_text()
        finally:
            page.context.close()
        audit = {"event": "deployment_service.abort"}
        logs = httpx.get(f"{stack.base_url}/api/v2/eventLogs", params=audit, headers=headers, timeout=10).json()
        logs = logs["event_logs"]
        assert [(log["owner"], log["run_id"], log["task_id"]) for log in logs] == [("admin", run_id, "roll_out")]
    finally:
        stop_all([process])


def run_dag_test(stack: Stack, dag_id: str, timeout: float = STEP_TIMEOUT) -> str:
    """Run ``airflow dags test dag_id`` to its end (it may fail: a failed task is what some runs show); its run id."""
    home, env = stack.home, stack.dag_test.env
    airflow = str(Path(sys.executable).parent / "airflow")
    process = ManagedProcess(dag_id, [airflow, "dags", "test", dag_id], env, home / f"{dag_id}.log", home).start()
    try:
        wait_until(
            lambda: not process.alive,
            timeout=timeout,
            what=f"airflow dags test {dag_id} ends",
            interval=0.25,
            diagnostics=lambda: process.tail(60),
        )
    finally:
        stop_all([process])
    token = api_token(stack)
    answer = httpx.get(
        f"{stack.base_url}/api/v2/dags/{dag_id}/dagRuns", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    runs = answer.json().get("dag_runs", []) if answer.status_code == 200 else []
    assert runs, f"no run of {dag_id}: {answer.status_code} {answer.text[:300]}\n{process.tail(60)}"
    return str(runs[0]["dag_run_id"])
