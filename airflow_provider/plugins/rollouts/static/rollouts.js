// The Rollouts view's pages: plain JavaScript, no build step, no dependency.
// Every text from the service or from Airflow is set with textContent (never parsed as HTML).
"use strict";

const BODY = document.body;
const APP = BODY.dataset.appPath || "/deployment-service/";
const AIRFLOW = BODY.dataset.airflowRoot || "/";
const VIEW = document.getElementById("view");
const FLEET_POLL_MS = 2000;
const DEPLOYMENT_POLL_MS = { busy: 5000, idle: 30000 };
const PAGE_ROWS = 250;

const STATUS_TONE = {
  READY: "ok", DEPLOYED: "ok", landed: "ok", unchanged: "ok", rolled_out: "ok", revision_live: "ok",
  success: "ok", done: "ok",
  AWAITING_DATABASE: "run", CREATING: "run", QUEUED: "run", AWAITING_BUILD: "run", BUILDING: "run",
  AWAITING_DEPLOY: "run", DEPLOYING: "run", rolling_out: "run", running: "run", deferred: "run",
  queued: "run", scheduled: "run", "rolling out": "run", verifying: "run", "rolling back": "warn", paused: "warn",
  UNUSED: "warn", AWAITING_DELETE: "warn", rolled_back: "warn", up_for_retry: "warn", status_changed: "warn",
  rolled_back_with_wave: "warn", rolled_back_partially: "bad", rolled_back_with_wave_partially: "bad",
  rolled_back_reason_unknown: "warn", analysing: "run", passed: "ok", inconclusive: "warn",
  not_patched: "off", pending: "off",
  // what the record says a task did to a revision (a mark's role) and a task's newest outcome
  judging: "run", rejected: "bad", timed_out: "bad", rolling_back: "warn", rolling_back_to: "run",
  rolled_back_to: "ok", rollback_revision: "ok", rolled_back_from: "warn", asking: "warn", answered: "run",
  failed: "bad", CREATE_FAILED: "bad", BUILD_FAILED: "bad", DEPLOY_FAILED: "bad", INTERRUPTED: "bad",
  revision_failed: "bad", deleted: "bad", upstream_failed: "bad",
};

// ------------------------------------------------------------------------------------------ helpers
function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") element.addEventListener(name.slice(2), value);
    else if (name === "class") element.className = value;
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

function badge(text, title, tone) {
  const label = text === null || text === undefined || text === "" ? "—" : String(text);
  return h("span", { class: `badge ${STATUS_TONE[tone || label] || ""}`, title: title || null, "data-badge": label }, label.replaceAll("_", " "));
}

function seconds(value) {
  if (value === null || value === undefined) return "—";
  if (value < 90) return `${Math.round(value)} s`;
  if (value < 5400) return `${Math.round(value / 60)} min`;
  return `${(value / 3600).toFixed(1)} h`;
}

function doraCards(dora, id) {
  // The DORA figures from the record: what counts is on the view's documentation page.
  if (!dora) return null;
  const card = (label, value, extra) => h("div", { class: "card" }, h("div", { class: "label" }, label), h("div", { class: "value" }, value), extra ? h("div", { class: "small muted" }, extra) : null);
  const rate = dora.change_failure_rate === null ? "—" : `${Math.round(dora.change_failure_rate * 100)} %`;
  const restore = dora.time_to_restore, live = dora.patch_to_live;
  return h("section", { id, "data-rollouts": dora.rollouts },
    h("h2", {}, `Last ${Math.round(dora.window.days)} days`, h("span", { class: "muted small" }, " · DORA figures from the record")),
    h("div", { class: "cards" },
      card("Rollouts per day", String(dora.rollouts_per_day), `${dora.rollouts} rollout${dora.rollouts === 1 ? "" : "s"} on ${dora.deployments} deployment${dora.deployments === 1 ? "" : "s"}${dora.never_served ? ` · ${dora.never_served} never served` : ""}`),
      card("Change failure rate", rate, `${dora.failed} failed · ${dora.landed} landed${dora.in_progress ? ` · ${dora.in_progress} in progress` : ""}`),
      card("Time to restore", seconds(restore.median_seconds), restore.count ? `median of ${restore.count} · longest ${seconds(restore.max_seconds)}` : "no rollback of a failed rollout"),
      card("PATCH to live", seconds(live.median_seconds), live.count ? `median of ${live.count} · longest ${seconds(live.max_seconds)}` : "none went live")));
}

function shortId(id) {
  return id ? h("code", { title: id }, String(id).slice(0, 8)) : h("span", { class: "muted" }, "—");
}

function when(iso) {
  if (!iso) return h("span", { class: "muted" }, "—");
  const date = new Date(iso);
  const seconds = Math.round((Date.now() - date.getTime()) / 1000);
  let text;
  if (Math.abs(seconds) < 60) text = seconds >= 0 ? `${seconds} s ago` : `in ${-seconds} s`;
  else if (Math.abs(seconds) < 3600) text = seconds >= 0 ? `${Math.round(seconds / 60)} min ago` : `in ${Math.round(-seconds / 60)} min`;
  else if (Math.abs(seconds) < 86400) text = `${Math.round(seconds / 3600)} h ago`;
  else text = date.toLocaleString();
  return h("time", { datetime: iso, title: date.toLocaleString(), class: "nowrap" }, text);
}

function buildText(build) {
  if (!build || Object.keys(build).length === 0) return h("span", { class: "muted" }, "—");
  const main = build.image_uri || build.repo_ref || build.source_tarball_path || build.graph_config_path || "";
  const parts = [h("code", {}, main)];
  if (build.repo_commit_sha) parts.push(" ", h("code", { class: "muted", title: build.repo_commit_sha }, `@${build.repo_commit_sha.slice(0, 8)}`));
  return h("span", {}, parts);
}

function analysisDetails(analysis) {
  if (analysis === null || analysis === undefined) return null;
  const list = h("dl", { class: "kv" });
  const text = (value) => typeof value === "object" && value !== null ? JSON.stringify(value) : String(value);
  const add = (key, value) => {
    // A list (the measurements, one line each) reads as a list, not as JSON.
    list.append(h("dt", {}, key), h("dd", {}, Array.isArray(value) ? h("ul", {}, value.map((item) => h("li", {}, text(item)))) : text(value)));
  };
  if (typeof analysis === "object" && !Array.isArray(analysis)) for (const [key, value] of Object.entries(analysis)) if (key !== "charts") add(key, value);
  else add("analysis", analysis);
  const verdict = typeof analysis === "object" && analysis !== null ? analysis.verdict || analysis.status : null;
  return h("details", { class: "analysis" }, h("summary", {}, verdict ? `analysis: ${verdict}` : "analysis"), list);
}

// ------------------------------------------------------------------------------------------ charts
// Each check's measurements over the rounds, as plain SVG: its line (the threshold, or the bound the baseline made)
// dashed, each measurement a dot
// in its verdict's colour (a hollow one at the bottom when nothing could be measured), and under the plot one
// mark per round in the colour of that round's verdict (over all checks).
const SVG = "http://www.w3.org/2000/svg";
const CHART = { width: 280, height: 96, left: 44, right: 8, top: 8, plot: 62, band: 8 };

function svgEl(tag, attrs, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) if (value !== null && value !== undefined) element.setAttribute(name, String(value));
  for (const child of children.flat()) if (child !== null && child !== undefined) element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return element;
}

function chartNumber(value, unit) {
  if (value === null || value === undefined) return "no value";
  const text = Math.abs(value) >= 100 ? String(Math.round(value)) : String(Number(value.toPrecision(3)));
  return `${text}${unit || ""}`;
}

function measurementChart(chart) {
  const points = chart.points || [];
  const rounds = (chart.rounds || []).map((item) => item.round);
  const all = [...new Set([...rounds, ...points.map((point) => point.round)])].filter((round) => round !== null && round !== undefined).sort((a, b) => a - b);
  const values = points.map((point) => point.value).filter((value) => value !== null && value !== undefined);
  if (chart.threshold !== null && chart.threshold !== undefined) values.push(chart.threshold);
  let low = values.length ? Math.min(0, ...values) : 0, high = values.length ? Math.max(...values) : 1;
  if (high === low) high = low + 1;
  high += (high - low) * 0.1;
  const width = CHART.width - CHART.left - CHART.right;
  const x = (round) => CHART.left + (all.length <= 1 ? width / 2 : (all.indexOf(round) / (all.length - 1)) * width);
  const y = (value) => CHART.top + CHART.plot - ((value - low) / (high - low)) * CHART.plot;
  const bottom = CHART.top + CHART.plot;
  const tone = (verdict) => verdict === "passed" ? "ok" : verdict === "failed" ? "bad" : "warn";
  const measured = points.filter((point) => point.value !== null && point.value !== undefined);
  const parts = [
    svgEl("line", { x1: CHART.left, y1: bottom, x2: CHART.left + width, y2: bottom, class: "axis" }),
    svgEl("text", { x: CHART.left - 4, y: CHART.top + 8, class: "tick", "text-anchor": "end" }, chartNumber(high, chart.unit)),
    svgEl("text", { x: CHART.left - 4, y: bottom, class: "tick", "text-anchor": "end" }, chartNumber(low, chart.unit)),
  ];
  if (chart.threshold !== null && chart.threshold !== undefined) {
    // The line the verdicts were drawn against: the fixed threshold, the bound a baseline condition made from the
    // baseline, or the rate test's tolerated rate; labelled with what it is.
    const kind = chart.line_kind || "threshold", label = chart.line_label || chart.condition;
    parts.push(svgEl("line", { x1: CHART.left, y1: y(chart.threshold), x2: CHART.left + width, y2: y(chart.threshold), class: `threshold ${kind}`, "data-threshold": chart.threshold, "data-line-kind": kind },
      svgEl("title", {}, `${kind === "threshold" ? "threshold" : kind === "baseline" ? "from the baseline" : "tolerated (rate test)"}: ${label}`)));
    parts.push(svgEl("text", { x: CHART.left + width, y: y(chart.threshold) - 3, class: "tick", "text-anchor": "end", "data-line-label": kind }, label));
  }
  if (measured.length > 1) parts.push(svgEl("polyline", { points: measured.map((point) => `${x(point.round)},${y(point.value)}`).join(" "), class: "series" }));
  for (const point of points) {
    const missing = point.value === null || point.value === undefined;
    parts.push(svgEl("circle", { cx: x(point.round), cy: missing ? bottom : y(point.value), r: 3.5, class: `dot ${tone(point.verdict)}${missing ? " missing" : ""}`, "data-round": point.round, "data-verdict": point.verdict },
      svgEl("title", {}, `round ${point.round}: ${chartNumber(point.value, chart.unit)} (${chart.condition}): ${point.verdict}`)));
  }
  for (const item of chart.rounds || []) {
    parts.push(svgEl("rect", { x: x(item.round) - 5, y: bottom + 6, width: 10, height: CHART.band, rx: 2, class: `round ${tone(item.verdict)}`, "data-round-verdict": item.verdict },
      svgEl("title", {}, `round ${item.round}: ${item.verdict}`)));
    parts.push(svgEl("text", { x: x(item.round), y: bottom + 6 + CHART.band + 10, class: "tick", "text-anchor": "middle" }, String(item.round)));
  }
  const svg = svgEl("svg", { viewBox: `0 0 ${CHART.width} ${CHART.height + 14}`, width: CHART.width, height: CHART.height + 14, role: "img",
    "aria-label": `${chart.check}: ${points.length} measurement${points.length === 1 ? "" : "s"}, ${chart.line_kind === "baseline" || chart.line_kind === "tolerated" ? chart.line_label : `threshold ${chart.condition || "none"}`}` }, parts);
  return h("figure", { class: "chart", "data-chart": chart.check, "data-chart-verdict": chart.verdict },
    h("figcaption", { class: "small" }, badge(chart.verdict), " ", chart.check, h("span", { class: "muted" }, ` ${chart.condition}`)), svg);
}

function chartsBlock(analysis) {
  const charts = analysis && analysis.charts;
  if (!charts || !charts.length) return null;
  const total = analysis.measurements_total, shown = charts.reduce((sum, chart) => sum + chart.points.length, 0);
  return h("div", { class: "charts" }, charts.map(measurementChart),
    total && total > shown ? h("div", { class: "muted small" }, `the latest ${shown} of ${total} measurements`) : null);
}

function taskLink(item, label) {
  if (!item || !item.ti_path) return h("span", { class: "muted" }, item && item.origin ? item.origin : "—");
  return h("a", { href: item.ti_path, target: "_top", title: `${item.dag_id} / ${item.run_id} / ${item.task_id}` }, label || `${item.dag_id} › ${item.task_id}`);
}

function query() {
  return new URLSearchParams(window.location.search);
}

function setQuery(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value) search.set(name, value);
  const text = search.toString();
  window.history.replaceState(null, "", `${window.location.pathname}${text ? `?${text}` : ""}`);
}

async function getJSON(path, params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params || {})) if (value !== null && value !== undefined && value !== "") search.set(name, value);
  const url = `${APP}${path}${search.toString() ? `?${search}` : ""}`;
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!response.ok) {
    let detail = response.statusText;
    try {
      const body = await response.json();
      detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
    } catch (error) { /* keep the status text */ }
    const error = new Error(`${response.status}: ${detail}`);
    error.status = response.status;
    throw error;
  }
  return response.json();
}

function showError(target, error) {
  const text = error.status === 401 ? "You are not logged in to Airflow (401). Log in and reload."
    : error.message || String(error);
  target.replaceChildren(h("div", { class: "error", role: "alert", "data-error": error.status || "" }, text));
}

function applyColourMode() {
  let dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  try {
    const parent = window.parent && window.parent !== window ? window.parent.document.documentElement : null;
    if (parent) dark = parent.classList.contains("dark") || parent.style.colorScheme === "dark";
  } catch (error) { /* not framed by the UI */ }
  document.documentElement.classList.toggle("dark", Boolean(dark));
}

// -------------------------------------------------------------------------------- deployments page
async function deploymentsPage() {
  const params = query();
  const state = {
    conn_id: params.get("conn_id") || "",
    name_contains: params.get("name_contains") || "",
    tag_value_ids: params.get("tag_value_ids") || "",
    status: params.get("status") || "",
    deployment_type: params.get("deployment_type") || "",
    days: params.get("days") || "",
  };
  let known = { connections: [], default: "deployment_service_default" };
  try {
    known = await getJSON("api/connections");
  } catch (error) {
    showError(VIEW, error);
    return;
  }
  if (!state.conn_id) state.conn_id = known.connections.includes(known.default) || !known.connections.length ? known.default : known.connections[0];

  const connections = h("datalist", { id: "connections" }, [...new Set([known.default, ...known.connections])].map((id) => h("option", { value: id })));
  const field = (label, input) => h("label", {}, label, input);
  const inputs = {
    conn_id: h("input", { name: "conn_id", list: "connections", value: state.conn_id, "aria-label": "Connection" }),
    name_contains: h("input", { name: "name_contains", value: state.name_contains, placeholder: "part of a name" }),
    tag_value_ids: h("input", { name: "tag_value_ids", value: state.tag_value_ids, placeholder: "tag value ids, comma-separated" }),
    status: h("select", { name: "status" }, ["", "READY", "AWAITING_DATABASE", "UNUSED", "AWAITING_DELETE", "UNKNOWN"].map((value) => h("option", { value, selected: value === state.status }, value || "any"))),
    deployment_type: h("select", { name: "deployment_type" }, ["", "dev_free", "dev", "prod"].map((value) => h("option", { value, selected: value === state.deployment_type }, value || "any"))),
    days: h("select", { name: "days" }, ["", "7", "90", "365"].map((value) => h("option", { value, selected: value === state.days }, value ? `${value} days` : "30 days"))),
  };
  const results = h("section", { id: "results" }, h("p", { class: "muted" }, "Loading deployments…"));
  const form = h("form", { class: "toolbar", onsubmit: (event) => { event.preventDefault(); load(); } },
    field("Connection", inputs.conn_id), connections,
    field("Name", inputs.name_contains), field("Tag value", inputs.tag_value_ids),
    field("Status", inputs.status), field("Type", inputs.deployment_type), field("Figures over", inputs.days),
    h("button", { class: "primary", type: "submit" }, "Show"));
  VIEW.replaceChildren(
    h("div", { class: "row" }, h("h1", {}, "Deployments"), h("span", { class: "spacer" }),
      h("span", { class: "muted small" }, "Deployment Management Service · Rollouts view")),
    h("p", { class: "muted" }, "Every deployment of a connection, what it serves, and the last rollout that touched it."),
    form, results);

  async function load() {
    for (const name of Object.keys(state)) state[name] = inputs[name].value.trim();
    setQuery(state);
    results.replaceChildren(h("p", { class: "muted" }, "Loading deployments…"));
    try {
      renderDeployments(results, await getJSON("api/deployments", state), state.conn_id);
    } catch (error) {
      showError(results, error);
    }
  }
  await load();
}

function renderDeployments(target, data, connId) {
  const rows = data.deployments;
  const differ = rows.filter((row) => row.revisions_differ).length;
  const running = rows.filter((row) => row.last_rollout && row.last_rollout.running).length;
  const summary = h("div", { class: "row muted small", id: "summary" },
    `${rows.length} deployment${rows.length === 1 ? "" : "s"}`,
    data.truncated ? h("span", { class: "flag" }, `only the first ${data.max_deployments}`) : null,
    differ ? h("span", { class: "flag" }, `${differ} with latest ≠ active revision`) : null,
    running ? h("span", { class: "badge run" }, `${running} being rolled out`) : null,
    h("span", { class: "spacer" }), "answered ", when(data.fetched_at));
  const body = h("tbody");
  const table = h("table", { id: "deployments" },
    h("thead", {}, h("tr", {}, ["Name", "Status", "Type", "Source", "Serving", "Active / latest revision", "Last rollout"].map((title) => h("th", {}, title)))),
    body);
  let shown = 0;
  const more = h("button", { class: "more", onclick: () => page() }, "");
  function page() {
    for (const row of rows.slice(shown, shown + PAGE_ROWS)) body.append(deploymentRow(row, connId));
    shown = Math.min(rows.length, shown + PAGE_ROWS);
    more.textContent = `Show ${Math.min(PAGE_ROWS, rows.length - shown)} more of ${rows.length - shown}`;
    more.hidden = shown >= rows.length;
  }
  page();
  target.replaceChildren(summary, doraCards(data.dora, "dora"), rows.length ? table : h("p", { class: "muted" }, "No deployment matches."), more);
}

function deploymentRow(row, connId) {
  const link = `${APP}deployments/${encodeURIComponent(row.id)}?conn_id=${encodeURIComponent(connId)}`;
  const revisions = h("td", { class: "nowrap" }, shortId(row.active_revision_id));
  if (row.revisions_differ) revisions.append(" ", h("span", { class: "flag", title: "The latest revision is not the active one: a rollout in progress, or its build failed" }, "latest ≠ active"), " ", shortId(row.latest_revision_id));
  const serving = row.serving ? buildText(row.serving)
    : h("span", { class: "muted", title: "The active revision's build is on the deployment's page" }, "see revisions");
  return h("tr", { "data-deployment": row.name, "data-differ": row.revisions_differ ? "true" : "false" },
    h("td", {}, h("a", { href: link }, row.name), h("div", { class: "muted small" }, shortId(row.id))),
    h("td", {}, badge(row.status)),
    h("td", {}, row.deployment_type || h("span", { class: "muted" }, "—")),
    h("td", {}, row.source),
    h("td", {}, serving, row.revisions_differ && Object.keys(row.latest_build || {}).length ? h("div", { class: "muted small" }, "latest: ", buildText(row.latest_build)) : null),
    revisions,
    h("td", {}, lastRollout(row.last_rollout)));
}

function lastRollout(rollout) {
  if (!rollout) return h("span", { class: "muted" }, "none recorded");
  const label = rollout.running && rollout.outcome === "rolled_out" ? "rolling out" : rollout.outcome;
  return h("div", { "data-last-rollout": label },
    badge(label, rollout.message || null), " ", when(rollout.at),
    h("div", { class: "small" }, taskLink(rollout), rollout.wave ? h("span", { class: "muted" }, ` · ${rollout.wave}`) : null),
    rollout.tab_path ? h("div", { class: "small" }, h("a", { href: rollout.tab_path, target: "_top" }, "fleet rollout ›")) : null,
    questionLink(rollout));
}

function questionLink(rollout) {
  // An inconclusive analysis waiting for a person: where Airflow asks (its Required actions page).
  if (!rollout.question_path) return null;
  return h("div", { class: "small", "data-question": rollout.task_id },
    h("a", { href: rollout.question_path, target: "_top" }, "answer the question ›"));
}

// -------------------------------------------------------------------------------- deployment page
async function deploymentPage() {
  const id = decodeURIComponent(window.location.pathname.replace(/\/+$/, "").split("/").pop());
  const connId = query().get("conn_id") || "";
  const days = query().get("days") || "";
  const back = `${APP}deployments${connId ? `?conn_id=${encodeURIComponent(connId)}` : ""}`;
  const content = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  VIEW.replaceChildren(h("div", { class: "crumbs" }, h("a", { href: back }, "← Deployments")), content);
  let timer = null;
  async function load() {
    try {
      const data = await getJSON(`api/deployments/${encodeURIComponent(id)}`, { conn_id: connId, days });
      renderDeployment(content, data);
      const busy = data.running.length > 0 || data.deployment.revisions_differ || Boolean(actionPanel.querySelector("[data-requested]"));
      timer = setTimeout(load, busy ? DEPLOYMENT_POLL_MS.busy : DEPLOYMENT_POLL_MS.idle);
    } catch (error) {
      showError(content, error);
      if (error.status >= 500) timer = setTimeout(load, DEPLOYMENT_POLL_MS.idle);
    }
  }
  await load();
  return () => clearTimeout(timer);
}

// The confirmation and the answer of an action: kept across the page's refreshes.
const actionPanel = h("div", { id: "action" });
const ROLLBACK_TARGET_STATUSES = new Set(["DEPLOYED", "UNUSED", "", null, undefined]);

function rollbackButton(data, revision, active) {
  if (revision.active || !ROLLBACK_TARGET_STATUSES.has(revision.status)) return null;
  return h("button", { class: "action", "data-action": "rollback", "data-revision": revision.id,
    onclick: () => confirmRollback(data, revision, active) }, "Roll back to this revision");
}

function describe(revision) {
  const build = revision && revision.build ? (revision.build.image_uri || revision.build.repo_ref || revision.build.source_tarball_path || "") : "";
  return `${revision ? String(revision.id).slice(0, 8) : "?"}${build ? ` (${build})` : ""}`;
}

function confirmRollback(data, revision, active) {
  const d = data.deployment;
  const from = d.latest_revision_id || (active && active.id);
  const requestId = crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(16).slice(2)}`;
  const latest = data.revisions.find((item) => item.id === from);
  const text = `Roll deployment ${d.name} back to revision ${describe(revision)}, replacing revision ${describe(active)} that serves now`
    + `${from && active && from !== active.id ? ` (latest: ${describe(latest)})` : ""}. `
    + `Airflow runs DAG ${data.actions.rollback.dag_id} as you: it redeploys that revision's build, or patches it back, `
    + "and refuses if a newer revision goes out first. The audit log and the record name you.";
  const go = h("button", { class: "primary danger", "data-confirm": "rollback" }, "Roll back");
  const cancel = h("button", { "data-cancel": "rollback", onclick: () => actionPanel.replaceChildren() }, "Cancel");
  go.addEventListener("click", async () => {
    go.disabled = true;
    cancel.disabled = true;
    try {
      const run = await postJSON(`api/deployments/${encodeURIComponent(d.id)}/rollback`, {
        conn_id: data.conn_id, revision_id: revision.id, rolling_back_from: from, request_id: requestId,
      });
      actionPanel.replaceChildren(h("div", { class: "callout info", role: "status", "data-requested": run.run_id },
        `Rollback to revision ${String(revision.id).slice(0, 8)} requested by ${run.requested_by}: `,
        h("a", { href: run.ti_path, target: "_top" }, `run ${run.run_id}`), ` (${run.state}). This page follows it.`));
    } catch (error) {
      showError(actionPanel, error);
    }
  });
  actionPanel.replaceChildren(h("div", { class: "callout warn confirm", role: "dialog", "aria-label": "Confirm the rollback", "data-confirmation": "rollback" },
    h("p", { id: "confirm-text" }, text), h("div", { class: "row" }, go, cancel)));
}

async function postJSON(path, body) {
  const response = await fetch(`${APP}${path}`, {
    method: "POST", credentials: "same-origin",
    headers: { Accept: "application/json", "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  if (!response.ok) {
    let detail = response.statusText;
    try {
      const answer = await response.json();
      detail = typeof answer.detail === "string" ? answer.detail : JSON.stringify(answer.detail);
    } catch (error) { /* keep the status text */ }
    const error = new Error(`${response.status}: ${detail}`);
    error.status = response.status;
    throw error;
  }
  return response.json();
}

function renderDeployment(target, data) {
  const d = data.deployment;
  const card = (label, value) => h("div", { class: "card" }, h("div", { class: "label" }, label), h("div", { class: "value" }, value));
  const latest = data.revisions.find((revision) => revision.latest);
  const pieces = [
    h("div", { class: "row" }, h("h1", { id: "deployment-name" }, d.name), badge(d.status),
      d.url ? h("a", { href: d.url, target: "_blank", rel: "noopener noreferrer", class: "small" }, d.url) : null),
    h("div", { class: "muted small" }, h("code", {}, d.id), ` · ${d.source} · ${d.deployment_type || "type not reported"} · updated `, when(d.updated_at)),
    h("div", { class: "cards" },
      card("Serving", buildText(d.serving)),
      card("Active revision", shortId(d.active_revision_id)),
      card("Latest revision", h("span", {}, shortId(d.latest_revision_id), latest && latest.status ? [" ", badge(latest.status)] : null))),
  ];
  if (d.revisions_differ) {
    const reason = latest && latest.status ? `its status is ${latest.status}` : "a rollout in progress, or its build failed";
    pieces.push(h("div", { class: "callout warn", id: "differ" }, `The latest revision is not the active one (${reason}).`));
  }
  if (data.running.length) {
    pieces.push(h("h2", {}, "Rolling out now"), h("table", { id: "running" },
      h("thead", {}, h("tr", {}, ["Task", "Wave", "Outcome so far", "To revision", "Since"].map((title) => h("th", {}, title)))),
      h("tbody", {}, data.running.map((rollout) => h("tr", {},
        h("td", {}, taskLink(rollout), rollout.tab_path ? [" ", h("a", { href: rollout.tab_path, target: "_top", class: "small" }, "fleet rollout ›")] : null),
        h("td", {}, rollout.wave || "—"), h("td", {}, badge(rollout.outcome, rollout.message), questionLink(rollout)),
        h("td", {}, shortId(rollout.revision_id)), h("td", {}, when(rollout.at)))))));
  }
  pieces.push(h("h2", {}, "Revisions"));
  if (!data.revisions_available) {
    pieces.push(h("p", { class: "callout info" }, "The service has no revision endpoint: these are the revisions the deployment and Airflow's records name."));
  }
  // "Roll back to this revision": only for those the auth manager allows, when the rollback DAG is in Airflow.
  const offered = data.actions && data.actions.rollback;
  const rollback = Boolean(offered && offered.allowed && offered.available);
  const active = data.revisions.find((revision) => revision.active);
  pieces.push(actionPanel);
  pieces.push(h("table", { id: "revisions" },
    h("thead", {}, h("tr", {}, ["Revision", "Status", "Created", "Build", "Rolled out or back by", ...(rollback ? [""] : [])].map((title) => h("th", {}, title)))),
    h("tbody", {}, data.revisions.map((revision) => h("tr", { "data-revision": revision.id },
      h("td", { class: "nowrap" }, shortId(revision.id), revision.active ? [" ", h("span", { class: "badge ok" }, "active")] : null,
        revision.latest && !revision.active ? [" ", h("span", { class: "badge run" }, "latest")] : null),
      h("td", {}, revision.status ? badge(revision.status) : h("span", { class: "muted" }, "—")),
      h("td", {}, when(revision.created_at)),
      h("td", {}, buildText(revision.build)),
      h("td", {}, revision.rollouts.length ? revision.rollouts.map((mark) => h("div", { class: "mark", "data-role": mark.role, "data-run": mark.run_id || "" },
        badge(mark.label || mark.role, mark.message || null, mark.role), mark.by ? h("span", { class: "by", "data-by": mark.requested_by || "" }, ` ${mark.by}`) : null, " ", taskLink(mark),
        mark.try_number ? h("span", { class: "muted small" }, ` · try ${mark.try_number}`) : null, " ", when(mark.at), analysisDetails(mark.analysis), chartsBlock(mark.analysis)))
        : h("span", { class: "muted" }, "not by Airflow")),
      rollback ? h("td", { class: "nowrap" }, rollbackButton(data, revision, active)) : null)))));
  pieces.push(doraCards(data.dora, "dora"));
  pieces.push(h("p", { class: "muted small" }, "Answered ", when(data.fetched_at), " · what the provider's tasks did, from their records (failed tasks included), fleet progress and asset events, for the DAGs you may read."));
  target.replaceChildren(...pieces);
}

// -------------------------------------------------------------------------------- fleet tab
async function fleetPage() {
  const params = query();
  const key = {
    dag_id: params.get("dag_id"), run_id: params.get("run_id"), task_id: params.get("task_id"),
    map_index: params.get("map_index") || "-1",
  };
  const content = h("div", {}, h("p", { class: "muted" }, "Loading the fleet rollout…"));
  VIEW.replaceChildren(content);
  async function load() {
    let data;
    try {
      data = await getJSON("api/fleet", key);
    } catch (error) {
      showError(content, error);
      if (!error.status || error.status >= 500) setTimeout(load, FLEET_POLL_MS * 5);
      return;
    }
    renderFleet(content, data, key);
    if (data.task.running) setTimeout(load, FLEET_POLL_MS);
  }
  await load();
}

function renderFleet(target, data, key) {
  const task = data.task;
  if (!data.is_fleet) {
    target.replaceChildren(h("div", { class: "callout info", id: "not-fleet" },
      `Task ${task.task_id} (${task.operator || "unknown operator"}) is not a fleet rollout: this tab shows the waves of FleetRolloutOperator tasks. `,
      h("a", { href: `${AIRFLOW}plugin/rollouts`, target: "_top" }, "Open the Rollouts view")));
    return;
  }
  const pieces = [h("div", { class: "row" }, h("h1", {}, "Fleet rollout"), badge(task.state), h("span", { class: "muted" }, `try ${task.try_number}`),
    h("span", { class: "spacer" }), h("span", { class: "muted small", id: "updated" }, task.running ? "live · " : "", "recorded ", when(data.updated_at || task.end_date)))];
  if (!data.waves.length) {
    const why = data.stored_elsewhere ? "Its progress is kept by a worker-side state store backend; it shows here from XCom once the task ends."
      : task.running ? "The task has not planned its waves yet." : "No progress was recorded for this task.";
    pieces.push(h("div", { class: "callout info", id: "no-progress" }, why), ...approvalsSection(data, key));
    target.replaceChildren(...pieces);
    return;
  }
  const counts = data.counts || {};
  const total = Object.values(counts).reduce((sum, count) => sum + count, 0);
  const budget = data.budget || {};
  const card = (label, value, extra) => h("div", { class: "card" }, h("div", { class: "label" }, label), h("div", { class: "value" }, value), extra || null);
  const allowed = budget.allowed_failures;
  // What counts against the budget: the failures, and the rollbacks an earlier try made without a record of why.
  const counted = budget.failures + (budget.reason_unknown || 0);
  const unknownText = budget.reason_unknown ? ` + ${budget.reason_unknown} rolled back, reason unknown` : "";
  const used = allowed === null || allowed === undefined ? null : Math.min(100, Math.round(100 * counted / Math.max(1, allowed + 1)));
  pieces.push(h("div", { class: "cards", id: "fleet-summary" },
    card("Deployments", `${total} in ${data.waves.length} wave${data.waves.length === 1 ? "" : "s"}`,
      h("div", { class: "small muted" }, countsText(counts))),
    card("Failures", allowed === null || allowed === undefined ? `${budget.failures}${unknownText}` : `${budget.failures}${unknownText} of ${allowed} allowed`,
      used === null ? null : h("div", { class: `meter ${budget.exceeded ? "bad" : ""}` }, h("span", { style: null, "data-width": used }))),
    data.analysis ? card("Analysis", `${data.analysis.failures} failed or inconclusive`, h("div", {},
      h("div", { class: "small muted", id: "analysis-verdicts" }, countsText(data.analysis.verdicts)),
      data.analysis.would_have ? h("div", { class: "small", id: "analysis-dry-run" }, `dry run: ${Object.entries(data.analysis.would_have).map(([name, said]) => `${name} ${said}`).join(", ")}`) : null)) : null,
    card("Canary", data.canary ? h("span", {}, badge(data.canary.failed ? "failed" : canaryState(data)), ` ${data.canary.deployments.join(", ")}`) : h("span", { class: "muted" }, "none")),
    card("Now", nowText(data))));
  if (data.stopped) pieces.push(h("div", { class: "callout bad", id: "stopped" }, `Stopped: ${data.stopped}`));
  pieces.push(...abortSection(data, key));
  if (data.resume_at) pieces.push(h("div", { class: "callout warn", id: "paused" }, "Paused between waves; resumes ", when(data.resume_at), "."));
  if (data.question) pieces.push(fleetQuestion(data.question));
  const analysed = data.waves.some((wave) => wave.rows.some((row) => row.analysis));
  for (const wave of data.waves) pieces.push(waveSection(wave, data.current_wave === wave.index && task.running, data.conn_id, analysed));
  pieces.push(...approvalsSection(data, key));
  pieces.push(h("p", { class: "muted small" }, `Progress from ${data.source === "task_state_store" ? "the task state store (written as the task goes)" : data.source === "trigger" ? "the waiting trigger" : "the task's XCom (it ended)"}. `,
    h("a", { href: task.ti_path, target: "_top" }, "Task instance"), " · ", h("a", { href: task.run_path, target: "_top" }, "DAG run")));
  target.replaceChildren(...pieces);
  for (const meter of target.querySelectorAll("[data-width]")) meter.style.width = `${meter.dataset.width}%`;
}

// The open question about a wave's inconclusive analysis (on_inconclusive="ask"): the deployments asked about, and
// where Airflow asks (its Required actions page).
function fleetQuestion(question) {
  const names = question.deployments.map((item) => item.name).join(", ");
  return h("div", { class: "callout warn", id: "question", "data-question": question.wave },
    `Waiting for a person: the analysis of ${question.wave} was inconclusive (${names}); question ${question.number}, asked `,
    when(question.asked_at), ". Promote, roll back or analyse another interval: ",
    h("a", { href: question.question_path, target: "_top" }, "answer the question ›"));
}

// The approval gates of the fleet rollout's DAG run, each waiting one with its options as buttons for those who may
// answer (Airflow's human-in-the-loop answer, as the user; a confirmation first).
const approvalPanel = h("div", { id: "approval-action" });

function approvalsSection(data, key) {
  if (!data.approvals || !data.approvals.length) return [];
  return [h("h2", {}, "Approvals in this DAG run"), approvalPanel, h("table", { id: "approvals" },
    h("thead", {}, h("tr", {}, ["Task", "Asked", "State", "Answer", "By", "When"].map((title) => h("th", {}, title)))),
    h("tbody", {}, data.approvals.map((approval) => h("tr", { "data-approval": approval.task_id },
      h("td", {}, approval.task_id), h("td", { class: "msg" }, approval.subject), h("td", {}, badge(approval.state)),
      h("td", {}, approval.chosen_options ? approval.chosen_options.join(", ")
        : approval.may_answer ? (approval.options || []).map((option) => h("button", { class: "action", "data-answer": option,
          onclick: () => confirmAnswer(key, approval, option) }, option))
          : h("span", { class: "muted" }, "waiting")),
      h("td", {}, approval.responded_by || "—"), h("td", {}, when(approval.responded_at || approval.created_at))))))];
}

function confirmAnswer(key, approval, option) {
  const go = h("button", { class: "primary", "data-confirm": "answer" }, `Answer “${option}”`);
  const cancel = h("button", { onclick: () => approvalPanel.replaceChildren() }, "Cancel");
  go.addEventListener("click", async () => {
    go.disabled = true;
    cancel.disabled = true;
    try {
      const answer = await postJSON("api/approvals", { dag_id: key.dag_id, run_id: key.run_id, task_id: approval.task_id, map_index: approval.map_index, option });
      approvalPanel.replaceChildren(h("div", { class: "callout info", role: "status", "data-answered": approval.task_id },
        `${answer.responded_by} answered “${option}” to ${approval.task_id}${answer.resumed ? "; Airflow resumes the task" : ""}.`));
    } catch (error) {
      showError(approvalPanel, error);
    }
  });
  approvalPanel.replaceChildren(h("div", { class: "callout warn confirm", role: "dialog", "data-confirmation": "answer" },
    h("p", {}, `Answer “${option}” to ${approval.task_id} (“${approval.subject}”) in run ${key.run_id}, as you. Airflow records your answer and resumes the run.`),
    h("div", { class: "row" }, go, cancel)));
}

// Abort: the running task is asked to stop (nothing patched any more) or to roll the current wave back (and
// optionally the earlier waves); a confirmation names the deployments that change first. The task itself acts.
const abortPanel = h("div", { id: "abort-action" });

function abortSection(data, key) {
  const abort = data.abort;
  if (!abort) return [];
  const taken = abort.taken || abort.requested;
  if (taken) {
    const back = abort.taken && abort.taken.rollback_waves.length
      ? `; rolling back ${abort.taken.rollback_waves.map((index) => data.waves[index] ? data.waves[index].name : `wave ${index}`).join(", ")}` : "";
    return [h("div", { class: "callout warn", id: "aborted", "data-aborted-by": taken.requested_by },
      `Aborted by ${taken.requested_by} from the ${taken.requested_from} (${taken.mode}${taken.include_earlier ? ", earlier waves too" : ""})${abort.taken ? back : "; the task acts on it within a poll interval, or before its next step"}.`)];
  }
  if (!abort.allowed || !abort.available) return [];
  return [h("div", { class: "row" }, h("button", { class: "action", id: "abort", onclick: () => confirmAbort(data, key) }, "Abort…")), abortPanel];
}

function confirmAbort(data, key) {
  const preview = data.abort.preview || {};
  const requestId = crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(16).slice(2)}`;
  const names = (list) => (list && list.length ? list.join(", ") : "none");
  const choice = (mode, earlier, label, text) => h("label", { class: "abort-choice" },
    h("input", { type: "radio", name: "abort-mode", value: `${mode}${earlier ? "+earlier" : ""}`, "data-mode": mode, "data-earlier": earlier ? "1" : "" }), " ", h("b", {}, label), ` ${text}`);
  const choices = [
    choice("stop", false, "Stop after the deployments in flight:", `not started: ${names(preview.not_started)}.`),
    choice("rollback", false, `Roll the current wave back (${preview.current_wave || "none"}):`, `rolled back: ${names(preview.rolled_back)}; not started: ${names(preview.not_started)}.`),
    choice("rollback", true, "Roll back the current wave, the canary and every earlier wave:", `rolled back: ${names(preview.rolled_back_with_earlier)}; not started: ${names(preview.not_started)}.`),
  ];
  choices[0].querySelector("input").checked = true;
  const go = h("button", { class: "primary", "data-confirm": "abort" }, "Abort the rollout");
  const cancel = h("button", { onclick: () => abortPanel.replaceChildren() }, "Cancel");
  go.addEventListener("click", async () => {
    const picked = abortPanel.querySelector("input[name=abort-mode]:checked");
    go.disabled = true;
    cancel.disabled = true;
    try {
      const answer = await postJSON("api/fleet/abort", { dag_id: key.dag_id, run_id: key.run_id, task_id: key.task_id, map_index: Number(key.map_index),
        mode: picked.dataset.mode, include_earlier: Boolean(picked.dataset.earlier), request_id: requestId });
      abortPanel.replaceChildren(h("div", { class: "callout info", role: "status", "data-abort-requested": answer.request_id },
        `${answer.requested_by} asked the task to abort; ${answer.woken ? `it stopped waiting (${WAITED[answer.woken] || answer.woken}) and acts on it now` : answer.wakes_in ? `it parked moments ago: it is woken in ${answer.wakes_in} s and acts on it then` : "it acts on it within a poll interval, or before its next step"}, then fails “aborted by ${answer.requested_by} from the Rollouts view”.`));
    } catch (error) {
      showError(abortPanel, error);
    }
  });
  abortPanel.replaceChildren(h("div", { class: "callout warn confirm", role: "dialog", "data-confirmation": "abort" },
    h("p", {}, `Abort ${key.task_id} in run ${key.run_id}, as you. The running task carries it out and then fails.`), ...choices,
    h("div", { class: "row" }, go, cancel)));
}

const WAITED = { pause: "the pause before the next wave", watch: "the watch of the current wave", analysis: "the analysis of the current wave", question: "the answer to its question, now “Roll back”" };

function canaryState(data) {
  const canary = data.waves.find((wave) => wave.name === "canary");
  return canary ? canary.state : "pending";
}

function nowText(data) {
  if (!data.task.running) return h("span", {}, badge(data.task.state), " ", when(data.task.end_date));
  const current = data.waves.find((wave) => wave.index === data.current_wave);
  return current ? h("span", {}, `${current.name}: `, badge(current.state)) : h("span", {}, "finishing");
}

function countsText(counts) {
  return Object.entries(counts).map(([outcome, count]) => `${count} ${outcome.replaceAll("_", " ")}`).join(" · ");
}

function deploymentLink(row, connId) {
  if (!connId || !row.deployment_id) return row.name;
  const path = `${AIRFLOW}plugin/rollouts${APP}deployments/${encodeURIComponent(row.deployment_id)}?conn_id=${encodeURIComponent(connId)}`;
  return h("a", { href: path, target: "_top", title: "This deployment in the Rollouts view" }, row.name);
}

function analysisCell(analysis) {
  // The analysis column: the verdict, the failing check, and the reason and measurements folded away.
  if (!analysis) return h("td", { "data-analysis": "" }, h("span", { class: "muted" }, "—"));
  return h("td", { "data-analysis": analysis.verdict || "" }, badge(analysis.verdict),
    analysis.failing_check ? h("div", { class: "small" }, analysis.failing_check) : null,
    analysis.answer ? h("div", { class: "small", "data-answer": analysis.answer.choice },
      analysis.answer.timed_out ? `no answer in time: ${analysis.answer.choice}` : `${analysis.answer.choice} (${analysis.answer.by || "unnamed"})`) : null,
    analysisDetails(Object.fromEntries(Object.entries(analysis).filter(([key]) => !["verdict", "failing_check", "answer"].includes(key)))),
    chartsBlock(analysis));
}

function waveSection(wave, current, connId, analysed) {
  const counts = h("span", { class: "muted small" }, countsText(wave.counts));
  // The Analysis column comes after the revisions, so the first columns keep their places with or without it.
  const titles = ["Deployment", "Outcome", "From → to revision", "Rolled back to", ...(analysed ? ["Analysis"] : []), "Seconds", "Message"];
  return h("section", { class: `wave ${current ? "current" : ""}`, "data-wave": wave.name, "data-wave-state": wave.state },
    h("header", {}, h("h3", {}, wave.name), badge(wave.state), h("span", { class: "small" }, counts),
      h("span", { class: "spacer" }), h("span", { class: "muted small" }, `${wave.rows.length} deployment${wave.rows.length === 1 ? "" : "s"}`)),
    h("table", {},
      h("thead", {}, h("tr", {}, titles.map((title) => h("th", {}, title)))),
      h("tbody", {}, wave.rows.map((row) => h("tr", { "data-row": row.name, "data-outcome": row.outcome },
        h("td", {}, deploymentLink(row, connId), h("div", { class: "muted small" }, shortId(row.deployment_id))),
        h("td", {}, badge(row.outcome)),
        h("td", { class: "nowrap" }, shortId(row.from_revision), " → ", shortId(row.to_revision)),
        h("td", {}, row.rollback_revision ? shortId(row.rollback_revision) : h("span", { class: "muted" }, "—")),
        analysed ? analysisCell(row.analysis) : null,
        h("td", {}, row.seconds === null || row.seconds === undefined ? "—" : String(row.seconds)),
        h("td", { class: "msg" }, row.message))))));
}

// ------------------------------------------------------------------------------------------ start
applyColourMode();
const PAGES = { deployments: deploymentsPage, deployment: deploymentPage, fleet: fleetPage };
(PAGES[BODY.dataset.page] || deploymentsPage)().catch((error) => showError(VIEW, error));
