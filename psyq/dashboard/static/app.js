// psyq dashboard: hash routes over the JSON API. Every value from the store is put in the
// page with textContent (job names and data are user input), never as markup.
"use strict";

const STATES = ["waiting", "paused", "prioritized", "delayed", "active",
  "waiting-children", "completed", "failed"];
const PAGE = 20;
const REFRESH_MS = 3000;

const fromQuery = new URLSearchParams(location.search).get("token");
if (fromQuery) {
  sessionStorage.setItem("psyq-token", fromQuery);
  history.replaceState(null, "", location.pathname + location.hash);
}
const token = sessionStorage.getItem("psyq-token");
let readOnly = true;
let timer = null;

async function api(path, method = "GET", body = undefined) {
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  const reply = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const value = await reply.json();
  if (!reply.ok) throw new Error(value.error || reply.statusText);
  return value;
}

function el(tag, text, attrs = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  return node;
}

function link(text, hash) {
  return el("a", text, { href: hash });
}

function row(cells, numeric = []) {
  const tr = el("tr");
  cells.forEach((cell, i) => {
    const td = cell instanceof Node ? el("td") : el("td", cell);
    if (cell instanceof Node) td.append(cell);
    if (numeric.includes(i)) td.className = "n";
    tr.append(td);
  });
  return tr;
}

function table(headers, rows) {
  const t = el("table");
  const head = el("tr");
  headers.forEach((h) => head.append(el("th", h)));
  t.append(head, ...rows);
  return t;
}

function when(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 23) : "";
}

function button(text, action) {
  const b = el("button", text);
  b.disabled = readOnly;
  b.onclick = async () => {
    try {
      await action();
      await render();
    } catch (error) {
      showError(error);
    }
  };
  return b;
}

function showError(error) {
  document.getElementById("error").textContent = error ? String(error.message || error) : "";
}

async function queuesView() {
  const queues = await api("/api/queues");
  const rows = queues.map((q) => row(
    [link(q.name, "#/q/" + encodeURIComponent(q.name) + "/failed/0"),
      ...STATES.map((s) => q.counts[s]), q.workers, q.paused ? "paused" : ""],
    STATES.map((_, i) => i + 1),
  ));
  return [queues.length ? table(["queue", ...STATES, "workers", ""], rows) : el("p", "no queues")];
}

async function queueView(name, state, page) {
  const q = encodeURIComponent(name);
  const [details, jobs] = await Promise.all([
    api("/api/queues/" + q),
    api(`/api/queues/${q}/jobs?state=${state}&start=${page * PAGE}&end=${page * PAGE + PAGE - 1}`),
  ]);
  const tabs = el("p", undefined, { class: "tabs" });
  for (const s of STATES) {
    const a = link(`${s} (${details.counts[s]})`, `#/q/${q}/${s}/0`);
    if (s === state) a.className = "on";
    tabs.append(a);
  }
  const actions = el("p");
  actions.append(
    details.paused
      ? button("resume", () => api(`/api/queues/${q}/resume`, "POST"))
      : button("pause", () => api(`/api/queues/${q}/pause`, "POST")),
    button("retry all failed", () => api(`/api/queues/${q}/retry`, "POST", { state: "failed" })),
    button("clean completed", () => api(`/api/queues/${q}/clean`, "POST", { state: "completed" })),
  );
  const rows = jobs.jobs.map((job) => row([
    link(job.id, `#/q/${q}/job/${encodeURIComponent(job.id)}`), job.name, job.attempts,
    when(job.timestamp), when(job.processed_on), when(job.finished_on), job.failed_reason || "",
  ], [2]));
  const pager = el("p", `${jobs.total ? jobs.start + 1 : 0}–${jobs.start + jobs.jobs.length} of ${jobs.total} `);
  if (page > 0) pager.append(link("newer", `#/q/${q}/${state}/${page - 1}`), " ");
  if (jobs.start + jobs.jobs.length < jobs.total) pager.append(link("older", `#/q/${q}/${state}/${page + 1}`));
  const summary = el("p", `workers: ${details.workers.length}, schedulers: ${details.schedulers.length}`
    + (details.paused ? ", paused" : ""));
  return [summary, actions, tabs,
    table(["id", "name", "attempts", "added", "processed", "finished", "failed reason"], rows), pager];
}

async function jobView(name, id) {
  const q = encodeURIComponent(name);
  const j = encodeURIComponent(id);
  const job = await api(`/api/queues/${q}/jobs/${j}`);
  const actions = el("p");
  actions.append(
    button("retry", () => api(`/api/queues/${q}/jobs/${j}/retry`, "POST")),
    button("promote", () => api(`/api/queues/${q}/jobs/${j}/promote`, "POST")),
    button("remove", async () => {
      await api(`/api/queues/${q}/jobs/${j}/remove`, "POST");
      location.hash = `#/q/${q}/${job.state}/0`;
    }),
  );
  const fields = Object.entries(job).filter(([key]) => key !== "logs").map(([key, value]) =>
    row([key, ["timestamp", "processed_on", "finished_on"].includes(key) ? when(value)
      : JSON.stringify(value, null, 1)]));
  return [el("p", `${job.state}`), actions, table(["field", "value"], fields),
    el("h2", "logs"), el("pre", job.logs.join("\n") || "(none)")];
}

async function render() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  let nodes;
  if (parts[0] === "q" && parts[2] === "job") {
    document.getElementById("where").textContent = "/ " + parts[1] + " / job " + parts[3];
    nodes = await jobView(parts[1], parts[3]);
  } else if (parts[0] === "q") {
    document.getElementById("where").textContent = "/ " + parts[1];
    nodes = await queueView(parts[1], parts[2] || "failed", Number(parts[3] || 0));
  } else {
    document.getElementById("where").textContent = "";
    nodes = await queuesView();
  }
  document.getElementById("view").replaceChildren(...nodes);
  showError(null);
}

async function refresh() {
  clearTimeout(timer);
  try {
    await render();
  } catch (error) {
    showError(error);
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

window.addEventListener("hashchange", refresh);
api("/api/config").then((config) => { readOnly = config.read_only; }, showError).finally(refresh);
