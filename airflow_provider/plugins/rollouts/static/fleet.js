// The Rollouts view's fleet tab: a fleet rollout's waves, its approvals and its abort.
"use strict";

const FLEET_POLL_MS = 2000;

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
      `Aborted by ${taken.requested_by} from the ${taken.requested_from} (${taken.mode}${taken.include_earlier ? ", earlier waves too" : ""})${abort.taken ? back : "; the task acts on it within a poll interval, or before its next step"}.`,
      abort.cleared ? h("p", { "data-cleared": "" }, abort.cleared) : "")];
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
    choice("stop", false, "Stop after the deployments in flight:", `in flight (they finish and are judged): ${names(preview.in_flight)}; not started (never patched): ${names(preview.not_started)}.`),
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
        `${answer.requested_by} asked the task to abort (not started, never patched: ${names((answer.preview || {}).not_started)}); ${answer.woken ? `it stopped waiting (${WAITED[answer.woken] || answer.woken}) and acts on it now` : answer.wakes_in ? `it parked moments ago: it is woken in ${answer.wakes_in} s and acts on it then` : "it acts on it within a poll interval, or before its next step"}, then fails “aborted by ${answer.requested_by} from the Rollouts view”.`));
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
