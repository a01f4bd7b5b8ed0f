// The Rollouts view's deployment page: its revisions, who rolled them out or back, and "Roll back to this revision".
"use strict";

const DEPLOYMENT_POLL_MS = { busy: 5000, idle: 30000 };

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
  const rejected = rejectionWarning(revision, go);
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
    h("p", { id: "confirm-text" }, text), rejected, h("div", { class: "row" }, go, cancel)));
}

// A revision an analysis (or verify, or a bake) rejected: say when, by which run and why, and ask for a second,
// explicit confirmation before "Roll back" can be clicked.
function rejectionWarning(revision, go) {
  const rejections = (revision.rollouts || []).filter((mark) => mark.role === "rejected");
  if (!rejections.length) return null;
  go.disabled = true;
  const lines = rejections.map((mark) => h("li", { "data-rejected-by": mark.run_id || "" },
    `${mark.label || "rejected"} `, when(mark.at), ` by run ${mark.run_id || "?"} (${mark.dag_id || "?"}.${mark.task_id || "?"})`,
    mark.message ? `: ${mark.message}` : ""));
  const agree = h("input", { type: "checkbox", "data-acknowledge": "rejected",
    onchange: (event) => { go.disabled = !event.target.checked; } });
  return h("div", { class: "callout bad", "data-rejected": "rollback" },
    h("p", {}, h("strong", {}, `Revision ${String(revision.id).slice(0, 8)} was rejected:`)), h("ul", {}, lines),
    h("label", {}, agree, " I know this revision was rejected; roll back to it anyway"));
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
  if (data.guard) pieces.push(guardPanel(data));
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

// The guard after landing: the revision it guards, until when, what it last measured; "End guard" (edit access).
function guardPanel(data) {
  const g = data.guard;
  const rows = (g.measurements || []).slice(-6).map((m) => h("li", {}, `${m.check} = ${m.value} (${m.verdict}, round ${m.round})`));
  const end = g.may_end && !g.regressed ? h("button", { class: "action", "data-action": "end-guard", onclick: async (event) => {
    event.target.disabled = true;
    try {
      const ended = await postJSON(`api/deployments/${encodeURIComponent(data.deployment.id)}/guard/end`, { conn_id: data.conn_id, revision_id: g.revision_id });
      actionPanel.replaceChildren(h("div", { class: "callout info", role: "status" }, `Guard of revision ${String(ended.revision_id).slice(0, 8)} ended by ${ended.ended_by}.`));
    } catch (error) {
      showError(actionPanel, error);
    }
  } }, "End guard") : null;
  return h("div", { class: "callout info", id: "guard", "data-revision": g.revision_id },
    h("h2", {}, "Guarded after landing"),
    h("p", {}, "Revision ", shortId(g.revision_id), " is guarded until ", when(g.guarded_until), ` by ${(g.checks || []).join(", ")}`,
      " · last measured ", g.last_measured ? when(g.last_measured) : "not yet", " · back to ", shortId(g.previous_revision_id), " if it regresses."),
    g.regressed ? h("p", { class: "callout warn", id: "guard-regressed" }, g.regressed.message) : null,
    rows.length ? h("ul", { class: "small" }, rows) : null,
    end);
}
