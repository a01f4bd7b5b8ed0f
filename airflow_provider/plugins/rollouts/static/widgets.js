// The Rollouts view's shared widgets: constants, building elements, badges, times, requests, errors.
// Every text from the service or from Airflow is set with textContent (never parsed as HTML).
"use strict";

const BODY = document.body;
const APP = BODY.dataset.appPath || "/deployment-service/";
const AIRFLOW = BODY.dataset.airflowRoot || "/";
const VIEW = document.getElementById("view");

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

function questionLink(rollout) {
  // An inconclusive analysis waiting for a person: where Airflow asks (its Required actions page).
  if (!rollout.question_path) return null;
  return h("div", { class: "small", "data-question": rollout.task_id },
    h("a", { href: rollout.question_path, target: "_top" }, "answer the question ›"));
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
