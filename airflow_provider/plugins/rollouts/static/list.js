// The Rollouts view's deployments page: every deployment of a connection and the last rollout that touched it.
"use strict";

const PAGE_ROWS = 250;

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
