// psyq dashboard: hash routes over the JSON API, live by server-sent events.
// Every value from the store goes into the page as text (textContent, text nodes, SVG
// attributes), never as markup: job names, data, logs and stack traces are user input.
"use strict";

const STATES = ["waiting", "paused", "prioritized", "delayed", "active",
  "waiting-children", "completed", "failed"];
const LABELS = {
  waiting: "Waiting", paused: "Paused", prioritized: "Prioritized", delayed: "Delayed",
  active: "Active", "waiting-children": "Waiting children", completed: "Completed", failed: "Failed",
};
const CLEANABLE = ["completed", "failed", "delayed", "waiting", "prioritized", "paused"];
const PAGE = 20;
const POLL_MS = 3000; // the view's refresh while no event stream is up
const OVERVIEW_MS = 5000; // the queue list and the overview (no stream covers every queue)
const RETRY_STREAM_MS = 5000;
const HISTORY = 120; // samples of a queue's counts kept for its "counts over time" chart
const SVG = "http://www.w3.org/2000/svg";

const fromQuery = new URLSearchParams(location.search).get("token");
if (fromQuery) {
  sessionStorage.setItem("psyq-token", fromQuery);
  history.replaceState(null, "", location.pathname + location.hash);
}
const token = sessionStorage.getItem("psyq-token");

const app = {
  readOnly: true,
  skew: 0, // server clock minus this browser's
  queues: [],
  history: new Map(), // queue -> [{t, counts}]
  seq: 0,
  refreshTimer: null,
  stream: null, // {queue, controller, live}
  open: new Map(), // job cards shown open: "<queue>\n<id>" -> the tab shown
};

// ------------------------------------------------------------------ small helpers
function h(tag, props = {}, ...kids) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = String(value);
    else if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return node;
}

function s(tag, attrs = {}, ...kids) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  for (const kid of kids) node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return node;
}

const enc = encodeURIComponent;
const qpath = (queue) => "/api/queues/" + enc(queue);
const jpath = (queue, id) => `${qpath(queue)}/jobs/${enc(id)}`;
const now = () => Date.now() + app.skew;

async function api(path, method = "GET", body = undefined) {
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  const reply = await fetch(path, {
    method, headers, body: method === "GET" ? undefined : JSON.stringify(body || {}),
  });
  let value = null;
  try {
    value = await reply.json();
  } catch (_) {
    value = null;
  }
  if (!reply.ok) {
    const error = new Error((value && value.error) || `${reply.status} ${reply.statusText}`);
    error.status = reply.status;
    throw error;
  }
  return value;
}

function showError(error, sticky = false) {
  // An action's error stays until the next action or route; a failed read clears itself
  // once a read works again.
  const box = document.getElementById("error");
  box.textContent = error ? String(error.message || error) : "";
  box.hidden = !error;
  box.dataset.sticky = error && sticky ? "yes" : "no";
}

function clearReadError() {
  if (document.getElementById("error").dataset.sticky !== "yes") showError(null);
}

let noticeTimer = null;
function notice(text) {
  const box = document.getElementById("notice");
  box.textContent = text;
  box.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { box.hidden = true; }, 6000);
}

// ------------------------------------------------------------------ times
function ago(ms) {
  if (!ms) return "";
  const delta = now() - ms;
  const span = duration(Math.abs(delta), true);
  if (Math.abs(delta) < 1000) return "just now";
  return delta >= 0 ? `${span} ago` : `in ${span}`;
}

function duration(ms, coarse = false) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "";
  if (ms < 1000) return coarse ? "1 s" : `${Math.round(ms)} ms`;
  const sec = ms / 1000;
  if (sec < 60) return coarse ? `${Math.floor(sec)} s` : `${sec < 10 ? sec.toFixed(2) : sec.toFixed(1)} s`;
  const min = Math.floor(sec / 60);
  if (min < 60) return `${min} min${coarse ? "" : " " + Math.floor(sec % 60) + " s"}`;
  const hours = Math.floor(min / 60);
  if (hours < 48) return `${hours} h${min % 60 ? " " + (min % 60) + " min" : ""}`;
  return `${Math.floor(hours / 24)} d`;
}

function when(ms) {
  if (!ms) return h("span", { class: "muted", text: "—" });
  const iso = new Date(ms).toISOString();
  return h("time", { datetime: iso, title: iso.replace("T", " ").replace("Z", " UTC"), text: ago(ms) });
}

function pretty(value) {
  if (value === undefined) return "";
  return JSON.stringify(value, null, 2);
}

function traces(job) {
  // One entry per failed attempt, newest last, each a whole traceback with real newlines.
  const all = Array.isArray(job.stacktrace) ? job.stacktrace.filter((t) => t).map(String) : [];
  return all.reverse();
}

// ------------------------------------------------------------------ actions
function askConfirm(text, label) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = label;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}

function act(label, call, options = {}) {
  const button = h("button", {
    type: "button", class: [options.danger ? "danger" : "", options.small ? "small" : ""].join(" ").trim(),
    text: label, "aria-label": options.aria, "data-action": options.id,
  });
  button.disabled = app.readOnly;
  if (app.readOnly) button.title = "this dashboard is read-only";
  button.addEventListener("click", async (event) => {
    event.preventDefault();
    event.stopPropagation();
    if (options.confirm && !(await askConfirm(options.confirm, options.confirmLabel || label))) return;
    button.disabled = true;
    try {
      const result = await call();
      showError(null);
      if (options.done) notice(options.done(result));
      if (options.after) options.after(result);
    } catch (error) {
      showError(error, true);
    } finally {
      button.disabled = app.readOnly;
    }
    await refresh();
  });
  return button;
}

// ------------------------------------------------------------------ sidebar
let sidebarShown = "";
function renderSidebar(current) {
  const filter = document.getElementById("filter").value.trim().toLowerCase();
  const shown = app.queues.filter((q) => q.name.toLowerCase().includes(filter));
  // Re-drawn only when something in it changed, keeping the focus where it was.
  const signature = JSON.stringify([current, app.queues.length, shown]);
  if (signature === sidebarShown) return;
  sidebarShown = signature;
  const list = document.getElementById("queues");
  const focused = list.contains(document.activeElement) ? document.activeElement.dataset.queue : null;
  const items = shown.map((q) => {
    const link = h("a", { href: `#/q/${enc(q.name)}`, "data-queue": q.name },
      h("span", { class: "qname", text: q.name, title: q.name }),
      q.paused ? h("span", { class: "pill s-paused", text: "paused" }) : null,
      q.counts.active ? h("span", { class: "pill s-active", title: "active", text: q.counts.active }) : null,
      q.counts.failed ? h("span", { class: "pill s-failed", title: "failed", text: q.counts.failed }) : null,
      h("span", { class: "pill s-waiting", title: "waiting", text: q.counts.waiting + q.counts.paused }));
    if (q.name === current) link.setAttribute("aria-current", "page");
    return h("li", {}, link);
  });
  list.replaceChildren(...items);
  if (focused !== null) {
    const again = [...list.querySelectorAll("a[data-queue]")].find((a) => a.dataset.queue === focused);
    if (again) again.focus();
  }
  document.getElementById("queue-count").textContent = filter
    ? `${shown.length} of ${app.queues.length} queues`
    : `${app.queues.length} queue${app.queues.length === 1 ? "" : "s"}`;
}

let queuesRead = 0;
async function loadQueues(maxAge = 0) {
  if (maxAge && Date.now() - queuesRead < maxAge) return;
  app.queues = await api("/api/queues");
  queuesRead = Date.now();
}

// ------------------------------------------------------------------ routes
function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map((p) => {
    try { return decodeURIComponent(p); } catch (_) { return p; }
  });
  if (parts[0] === "q" && parts[1] && parts[2] === "job" && parts[3]) {
    return { view: "job", queue: parts[1], id: parts[3], tab: parts[4] || "" };
  }
  if (parts[0] === "q" && parts[1]) {
    return {
      view: "queue", queue: parts[1], state: STATES.includes(parts[2]) ? parts[2] : "",
      page: Math.max(0, Number.parseInt(parts[3] || "0", 10) || 0), search: parts[4] || "",
    };
  }
  return { view: "overview" };
}

function queueHash(queue, state, page = 0, search = "") {
  return `#/q/${enc(queue)}/${state}/${page}` + (search ? "/" + enc(search) : "");
}

function crumbs(r) {
  const nav = document.getElementById("crumbs");
  const items = [];
  if (r.queue) items.push(h("a", { href: `#/q/${enc(r.queue)}`, text: r.queue }));
  if (r.view === "job") items.push(h("span", { text: `job ${r.id}` }));
  nav.replaceChildren(...items);
  document.title = r.queue ? `${r.view === "job" ? "job " + r.id + " · " : ""}${r.queue} · psyq` : "psyq dashboard";
}

// ------------------------------------------------------------------ overview
function overviewView() {
  if (!app.queues.length) {
    return [h("h1", { text: "Queues" }),
      h("p", { class: "empty", text: "No queues in this store yet. Add a job and it appears here." })];
  }
  const cards = app.queues.map((q) => h("section", { class: "panel card", "data-queue": q.name },
    h("h3", {}, h("a", { href: `#/q/${enc(q.name)}`, text: q.name }), " ",
      q.paused ? h("span", { class: "badge paused-q", text: "paused" }) : null),
    h("div", { class: "counts" }, ...STATES.map((st) => h("div", {},
      h("b", { class: q.counts[st] ? "c-" + st : "muted", text: q.counts[st] }),
      h("span", { text: LABELS[st] })))),
    h("p", { class: "muted small", text: `${q.workers} worker${q.workers === 1 ? "" : "s"}` })));
  return [h("div", { class: "head" }, h("h1", { text: "Queues" })), h("div", { class: "cards" }, ...cards)];
}

// ------------------------------------------------------------------ charts
function barChart(title, values, state, unit, source) {
  const width = 300;
  const height = 70;
  const max = Math.max(1, ...values);
  const step = width / values.length;
  const total = values.reduce((a, b) => a + b, 0);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img",
    "aria-label": `${title}: ${total} in the last ${values.length} minutes, at most ${max} a minute` });
  svg.append(s("line", { x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5, class: "axis" }));
  values.forEach((value, i) => {
    if (!value) return;
    const barHeight = Math.max(2, (value / max) * (height - 4));
    const minutesAgo = values.length - 1 - i;
    svg.append(s("rect", { x: i * step + 0.5, y: height - barHeight, width: Math.max(1, step - 1),
      height: barHeight, class: "fill-" + state },
    s("title", {}, `${value} ${unit} ${minutesAgo ? minutesAgo + " min ago" : "this minute"}`)));
  });
  return h("section", { class: "panel chart", "data-chart": state },
    h("h3", {}, h("span", { text: title }),
      h("span", { class: "muted", text: `${total} · ${(total / values.length).toFixed(1)}/min` })),
    svg,
    h("p", { class: "muted small" }, `last ${values.length} min · peak ${max}/min`
      + (source === "jobs" ? " · counted from the kept jobs" : "")));
}

function countsChart(queue) {
  const samples = app.history.get(queue) || [];
  const width = 300;
  const height = 70;
  const lines = ["waiting", "active", "delayed", "failed"];
  const max = Math.max(1, ...samples.flatMap((p) => lines.map((st) => p.counts[st] || 0)));
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img",
    "aria-label": "counts of waiting, active, delayed and failed jobs since this page opened" });
  svg.append(s("line", { x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5, class: "axis" }));
  if (samples.length > 1) {
    const t0 = samples[0].t;
    const span = Math.max(1, samples[samples.length - 1].t - t0);
    for (const st of lines) {
      const points = samples.map((p) => {
        const x = ((p.t - t0) / span) * width;
        const y = height - 2 - ((p.counts[st] || 0) / max) * (height - 6);
        return `${x.toFixed(1)},${y.toFixed(1)}`;
      }).join(" ");
      svg.append(s("polyline", { points, class: "line-" + st, "data-line": st }));
    }
  }
  const since = samples.length ? duration(now() - samples[0].t, true) : "0 s";
  return h("section", { class: "panel chart", "data-chart": "counts" },
    h("h3", {}, h("span", { text: "Counts over time" }), h("span", { class: "muted", text: `max ${max}` })),
    svg,
    h("div", { class: "legend" }, ...lines.map((st) => h("span", { class: "c-" + st, text: "■ " + LABELS[st] })),
      h("span", { class: "muted", text: `since this page opened (${since})` })));
}

// Per-minute figures: read again after 10 s, or once an event says a job finished (the
// stream sends at most four messages a second).
const METRICS_MS = 10000;
const metricsCache = new Map();
async function metricsOf(queue) {
  const kept = metricsCache.get(queue);
  if (kept && !kept.stale && now() - kept.t < METRICS_MS) return kept.value;
  const value = await api(`${qpath(queue)}/metrics?minutes=60`);
  metricsCache.set(queue, { t: now(), value });
  return value;
}

function remember(queue, counts) {
  const samples = app.history.get(queue) || [];
  samples.push({ t: now(), counts });
  if (samples.length > HISTORY) samples.shift();
  app.history.set(queue, samples);
}

// ------------------------------------------------------------------ a queue
async function queueView(r) {
  const details = await api(qpath(r.queue));
  const state = r.state || STATES.find((st) => details.counts[st]) || "waiting";
  if (!r.state) {
    // The first state with jobs, chosen once: the address keeps it, so live updates that
    // empty that state do not switch the tab under the reader.
    history.replaceState(null, "", location.pathname + location.search + queueHash(r.queue, state));
  }
  const start = r.page * PAGE;
  const search = r.search ? "&search=" + enc(r.search) : "";
  const [jobs, metrics, groups] = await Promise.all([
    api(`${qpath(r.queue)}/jobs?state=${state}&start=${start}&end=${start + PAGE - 1}${search}`),
    metricsOf(r.queue),
    api(`${qpath(r.queue)}/groups?start=0&end=${PAGE - 1}`).catch(() => null),
  ]);
  const opened = jobs.jobs.filter((job) => app.open.has(cardKey(r.queue, job.id)));
  const full = new Map(await Promise.all(opened.map(async (job) =>
    [job.id, await api(jpath(r.queue, job.id)).catch(() => null)])));
  remember(r.queue, details.counts);
  const known = app.queues.find((x) => x.name === r.queue);
  if (known) Object.assign(known, { counts: details.counts, paused: details.paused, workers: details.workers.length });
  const q = r.queue;
  const toolbar = h("div", { class: "toolbar", role: "toolbar", "aria-label": "queue actions" },
    details.paused
      ? act("Resume", () => api(`${qpath(q)}/resume`, "POST"), { id: "resume", done: () => `Resumed ${q}` })
      : act("Pause", () => api(`${qpath(q)}/pause`, "POST"), { id: "pause", done: () => `Paused ${q}` }),
    ["failed", "completed"].includes(state)
      ? act(`Retry all ${state}`, () => api(`${qpath(q)}/retry`, "POST", { state }), {
        id: "retry-all", confirm: `Retry every ${state} job of ${q} (${details.counts[state]})?`,
        confirmLabel: "Retry all", done: (v) => `Retried ${v.retried} job${v.retried === 1 ? "" : "s"}`,
      }) : null,
    state === "delayed"
      ? act("Promote all delayed", () => api(`${qpath(q)}/promote`, "POST"), {
        id: "promote-all", confirm: `Run every delayed job of ${q} now?`, confirmLabel: "Promote all",
        done: (v) => `Promoted ${v.promoted} job${v.promoted === 1 ? "" : "s"}`,
      }) : null,
    CLEANABLE.includes(state)
      ? act(`Clean ${state}`, () => api(`${qpath(q)}/clean`, "POST", { state, grace: 0, limit: 0 }), {
        id: "clean", danger: true, confirmLabel: "Remove them",
        confirm: `Remove every ${state} job of ${q} (${details.counts[state]})? This cannot be undone.`,
        done: (v) => `Removed ${v.removed} job${v.removed === 1 ? "" : "s"}`,
      }) : null);
  const tabs = h("nav", { class: "tabs", "aria-label": "job states" }, ...STATES.map((st) => {
    const a = h("a", { href: queueHash(q, st), class: "s-" + st, "data-state": st },
      LABELS[st], h("span", { class: "pill s-" + st, text: details.counts[st] }));
    if (st === state) a.setAttribute("aria-current", "page");
    return a;
  }));
  return [
    h("div", { class: "head" }, h("h1", { text: q }),
      details.paused ? h("span", { class: "badge paused-q", text: "paused" }) : null),
    toolbar,
    h("div", { class: "charts" },
      barChart("Completed per minute", metrics.completed, "completed", "completed", metrics.source),
      barChart("Failed per minute", metrics.failed, "failed", "failed", metrics.source),
      countsChart(q)),
    tabs,
    searchForm(q, state, r.search),
    jobList(q, state, jobs, full),
    pager(q, state, r.page, jobs, r.search),
    groups && groups.count ? h("h2", { text: `Groups (${groups.count})` }) : null,
    groups && groups.count ? groupsTable(q, groups) : null,
    h("h2", { text: `Workers (${details.workers.length})` }),
    workersTable(details.workers),
    h("h2", { text: `Job schedulers (${details.schedulers.length})` }),
    schedulersTable(details.schedulers),
  ];
}

function searchForm(queue, state, search) {
  const input = h("input", { type: "search", id: "job-search", name: "search", value: search,
    placeholder: "Find a job by id, or by name in this state", "aria-label": "job id or name",
    autocomplete: "off" });
  const form = h("form", { class: "search", role: "search" }, input,
    h("button", { type: "submit", text: "Find" }),
    search ? h("a", { href: queueHash(queue, state), class: "small", text: "clear" }) : null);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text) { location.hash = queueHash(queue, state); return; }
    try {
      await api(jpath(queue, text));
      location.hash = `#/q/${enc(queue)}/job/${enc(text)}`;
    } catch (error) {
      if (error.status !== 404) { showError(error); return; }
      location.hash = queueHash(queue, state, 0, text);
    }
  });
  return form;
}

function progressBar(progress, big = false, state = "") {
  // A number is a percentage; 0 is shown only while the job runs (every job starts at 0).
  if (typeof progress !== "number" || (!progress && state !== "active")) return null;
  const value = Math.max(0, Math.min(100, progress));
  const fill = h("span");
  fill.style.width = value + "%";
  return h("div", { class: "bar" + (big ? " big" : ""), role: "progressbar", "aria-valuemin": 0,
    "aria-valuemax": 100, "aria-valuenow": value, title: `${value}%`, "aria-label": "progress" }, fill);
}

function jobActions(queue, job, state, small = true, onPage = false) {
  const id = job.id;
  const out = [];
  if (state === "failed" || state === "completed") {
    out.push(act("Retry", () => api(`${jpath(queue, id)}/retry`, "POST"), {
      id: "retry", small, aria: `Retry job ${id}`, done: () => `Job ${id} retried`,
    }));
  }
  if (state === "delayed") {
    out.push(act("Promote", () => api(`${jpath(queue, id)}/promote`, "POST"), {
      id: "promote", small, aria: `Promote job ${id}`, done: () => `Job ${id} promoted`,
    }));
  }
  if (state === "active") {
    out.push(act("Cancel", () => api(`${jpath(queue, id)}/cancel`, "POST"), {
      id: "cancel", small, danger: true, aria: `Cancel job ${id}`, confirmLabel: "Ask to stop",
      confirm: `Ask the worker running job ${id} (${job.name}) to stop it? Its processor sees the `
        + "cancellation and the job fails.",
      done: () => `Asked the worker to stop job ${id}`,
    }));
  } else {
    out.push(act("Remove", () => api(`${jpath(queue, id)}/remove`, "POST"), {
      id: "remove", small, danger: true, aria: `Remove job ${id}`, confirmLabel: "Remove",
      confirm: `Remove job ${id} (${job.name}) from ${queue}? This cannot be undone.`,
      done: () => `Job ${id} removed`,
      after: onPage ? () => { location.hash = queueHash(queue, state); } : undefined,
    }));
  }
  return out;
}

const cardKey = (queue, id) => queue + "\n" + id;
const CARD_TABS = ["data", "options", "logs", "error", "result"];

function detailsToggle(queue, job) {
  const key = cardKey(queue, job.id);
  const open = app.open.has(key);
  const button = h("button", { type: "button", class: "small", "data-action": "details",
    "aria-expanded": String(open), "aria-label": `${open ? "Hide" : "Show"} the details of job ${job.id}`,
    text: open ? "Hide" : "Details" });
  button.addEventListener("click", () => {
    if (app.open.has(key)) app.open.delete(key);
    else app.open.set(key, job.failed_reason ? "error" : "data");
    refresh();
  });
  return button;
}

function cardDetails(queue, job) {
  // A job's data, options, logs, error and result inside its card, tab by tab.
  const key = cardKey(queue, job.id);
  const box = h("div", { class: "details", "data-details": job.id });
  const draw = async (focus) => {
    const tab = app.open.get(key) || "data";
    const labels = { data: "Data", options: "Options", logs: `Logs (${job.logs_total})`, error: "Error",
      result: "Result" };
    const tabs = h("div", { class: "tabs", role: "tablist", "aria-label": `job ${job.id}` },
      ...CARD_TABS.map((t) => {
        const b = h("button", { type: "button", role: "tab", "data-tab": t, "aria-selected": String(t === tab),
          class: t === "error" && job.failed_reason ? "s-failed" : "", text: labels[t] });
        b.addEventListener("click", () => { app.open.set(key, t); draw(true); });
        return b;
      }));
    tabs.addEventListener("keydown", (event) => {
      // The tab pattern's keys: arrows move between tabs, Home and End to the ends.
      const at = CARD_TABS.indexOf(app.open.get(key) || "data");
      const to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: CARD_TABS.length - 1 }[event.key];
      if (to === undefined) return;
      event.preventDefault();
      app.open.set(key, CARD_TABS[(to + CARD_TABS.length) % CARD_TABS.length]);
      draw(true);
    });
    box.replaceChildren(tabs, h("div", { role: "tabpanel" }, await jobPanel(queue, job, tab)));
    if (focus) box.querySelector(`[data-tab="${tab}"]`).focus();
  };
  draw(false);
  return box;
}

function jobList(queue, state, page, full = new Map()) {
  if (!page.jobs.length) {
    const text = page.search ? `No ${LABELS[state].toLowerCase()} job is named like “${page.search}”.`
      : `No ${LABELS[state].toLowerCase()} jobs.`;
    return h("p", { class: "empty", text });
  }
  const items = page.jobs.map((job) => {
    const waited = job.processed_on ? job.processed_on - job.timestamp : null;
    const ran = job.finished_on && job.processed_on ? job.finished_on - job.processed_on : null;
    return h("li", { class: "job s-" + state, "data-job": job.id },
      h("div", { class: "title" },
        h("a", { href: `#/q/${enc(queue)}/job/${enc(job.id)}`, text: job.name || "(no name)" }),
        h("span", { class: "muted mono", text: "#" + job.id }),
        job.parent_key ? h("span", { class: "muted small", text: "in a flow" }) : null),
      h("div", { class: "acts" }, progressBar(job.progress, false, state), detailsToggle(queue, job),
        ...jobActions(queue, job, state)),
      h("div", { class: "meta" },
        h("span", {}, "added ", when(job.timestamp)),
        job.delay && state === "delayed"
          ? h("span", {}, "runs ", when(job.timestamp + job.delay)) : null,
        job.priority ? h("span", { text: `priority ${job.priority}` }) : null,
        waited !== null ? h("span", { text: `waited ${duration(waited)}` }) : null,
        ran !== null ? h("span", { text: `ran ${duration(ran)}` }) : null,
        job.finished_on ? h("span", {}, "finished ", when(job.finished_on)) : null,
        job.attempts ? h("span", { text: `attempts ${job.attempts}` }) : null),
      job.data_preview ? h("div", { class: "preview mono", title: "data", text: job.data_preview }) : null,
      job.failed_reason ? h("div", { class: "reason", text: job.failed_reason }) : null,
      full.get(job.id) ? cardDetails(queue, full.get(job.id)) : null);
  });
  return h("ul", { class: "jobs", "aria-label": `${LABELS[state]} jobs` }, ...items);
}

function pager(queue, state, page, jobs, search) {
  const pages = Math.max(1, Math.ceil(jobs.total / PAGE));
  const first = jobs.total ? jobs.start + 1 : 0;
  const last = jobs.start + jobs.jobs.length;
  const nav = h("nav", { class: "pager", "aria-label": "pages" });
  nav.append(page > 0
    ? h("a", { href: queueHash(queue, state, page - 1, search), rel: "prev", text: "‹ Newer" })
    : h("span", { class: "muted", text: "‹ Newer" }));
  let text = `${first}–${last} of ${jobs.total} · page ${page + 1} of ${pages}`;
  if (jobs.search) {
    text += ` · name contains “${jobs.search}”` + (jobs.all_scanned ? "" : ` (among the newest ${jobs.scanned})`);
  }
  nav.append(h("span", { class: "muted", "data-pages": pages, text }));
  nav.append(last < jobs.total
    ? h("a", { href: queueHash(queue, state, page + 1, search), rel: "next", text: "Older ›" })
    : h("span", { class: "muted", text: "Older ›" }));
  return nav;
}

function table(headers, rows, label) {
  return h("div", { class: "scroll" }, h("table", { "aria-label": label },
    h("thead", {}, h("tr", {}, ...headers.map((x) => h("th", { scope: "col", text: x })))),
    h("tbody", {}, ...rows.map((cells) => h("tr", {}, ...cells.map((c) => h("td", {}, c)))))));
}

function workersTable(workers) {
  if (!workers.length) return h("p", { class: "muted", text: "No worker is registered on this queue." });
  return table(["name", "concurrency", "pid", "started"], workers.map((w) => [
    h("span", { class: "mono", text: w.name || w.id || "" }), String(w.concurrency ?? ""),
    String(w.pid ?? ""), when(w.started),
  ]), "workers");
}

function groupsTable(queue, groups) {
  // A page of the queue's groups by id: counts, status, and pause or resume for each.
  return table(["group", "waiting", "active", "status", ""], groups.groups.map((g) => {
    const paused = g.status === "paused";
    const path = `${qpath(queue)}/groups/${enc(g.id)}/${paused ? "resume" : "pause"}`;
    return [
      h("span", { class: "mono", text: g.id }), String(g.waiting), String(g.active),
      h("span", { class: "pill s-" + (paused ? "paused" : g.status === "waiting" ? "waiting" : "delayed"), text: g.status }),
      act(paused ? "Resume" : "Pause", () => api(path, "POST"), {
        id: `group-${paused ? "resume" : "pause"}-${g.id}`,
        done: () => `${paused ? "Resumed" : "Paused"} group ${g.id}`,
      }),
    ];
  }), "groups");
}

function schedulersTable(schedulers) {
  if (!schedulers.length) return h("p", { class: "muted", text: "No job scheduler on this queue." });
  return table(["id", "repeats", "next run", "job", "runs so far"], schedulers.map((x) => [
    h("span", { class: "mono", text: x.key || x.id || "" }),
    x.pattern ? `cron ${x.pattern}${x.tz ? " (" + x.tz + ")" : ""}` : x.every ? `every ${duration(Number(x.every))}` : "",
    x.next ? h("span", {}, when(Number(x.next))) : h("span", { class: "muted", text: "none" }),
    x.name || "", String(x.iterationCount ?? x.iteration_count ?? ""),
  ]), "job schedulers");
}

// ------------------------------------------------------------------ a job
const JOB_TABS = ["data", "options", "logs", "error", "result", "flow"];

async function jobView(r) {
  const job = await api(jpath(r.queue, r.id));
  const q = r.queue;
  const failed = Boolean(job.failed_reason || traces(job).length);
  const tab = JOB_TABS.includes(r.tab) ? r.tab : failed ? "error" : "data";
  const waited = job.processed_on ? job.processed_on - job.timestamp : null;
  const ran = job.finished_on && job.processed_on ? job.finished_on - job.processed_on : null;
  const attemptsAllowed = (job.opts && job.opts.attempts) || 1;
  const fact = (label, value) => h("div", {}, h("dt", { text: label }), h("dd", {}, value));
  const facts = h("dl", { class: "facts" },
    fact("State", h("span", { class: "c-" + job.state, "data-field": "state", text: LABELS[job.state] || job.state })),
    fact("Added", when(job.timestamp)),
    fact("Started", when(job.processed_on)),
    fact("Finished", when(job.finished_on)),
    fact("Waited", waited === null ? "—" : duration(waited)),
    fact("Ran for", ran === null ? "—" : duration(ran)),
    fact("Attempts", `${job.attempts_made} of ${attemptsAllowed}`),
    job.priority ? fact("Priority", String(job.priority)) : null,
    job.delay ? fact("Delay", duration(job.delay)) : null,
    job.processed_by ? fact("Worker", h("span", { class: "mono", text: job.processed_by })) : null,
    job.parent ? fact("Parent", h("a", { href: `#/q/${enc(job.parent.queue)}/job/${enc(job.parent.id)}`,
      text: `${job.parent.queue} #${job.parent.id}` })) : null);
  const progress = typeof job.progress === "number"
    ? (job.progress || job.state === "active") && h("div", { class: "head" },
      progressBar(job.progress, true, job.state), h("span", { text: `${job.progress}%` }))
    : job.progress !== null && job.progress !== undefined && job.progress !== 0
      ? h("div", {}, h("h2", { text: "Progress" }), h("pre", { text: pretty(job.progress) })) : null;
  const tabs = h("nav", { class: "tabs", "aria-label": "job details" }, ...JOB_TABS.map((t) => {
    const label = { data: "Data", options: "Options", logs: `Logs (${job.logs_total})`, error: "Error",
      result: "Result", flow: "Flow" }[t];
    const a = h("a", { href: `#/q/${enc(q)}/job/${enc(r.id)}/${t}`, "data-tab": t,
      class: t === "error" && failed ? "s-failed" : "" }, label);
    if (t === tab) a.setAttribute("aria-current", "page");
    return a;
  }));
  return [
    h("div", { class: "head" }, h("h1", {}, job.name || "(no name)", " ", h("span", { class: "muted mono", text: "#" + job.id })),
      h("span", { class: "badge pill s-" + job.state, "data-state": job.state, text: LABELS[job.state] || job.state })),
    h("div", { class: "toolbar", role: "toolbar", "aria-label": "job actions" },
      ...jobActions(q, job, job.state, false, true)),
    facts,
    progress,
    tabs,
    h("section", { class: "panel", "data-panel": tab }, await jobPanel(q, job, tab)),
  ];
}

async function jobPanel(queue, job, tab) {
  if (tab === "data") return h("pre", { "data-json": "data", text: pretty(job.data) });
  if (tab === "options") return h("pre", { "data-json": "opts", text: pretty(job.opts) });
  if (tab === "result") {
    return job.returnvalue === null || job.returnvalue === undefined
      ? h("p", { class: "muted", text: "No return value (yet)." })
      : h("pre", { "data-json": "returnvalue", text: pretty(job.returnvalue) });
  }
  if (tab === "logs") {
    if (!job.logs.length) return h("p", { class: "muted", text: "No log lines." });
    const first = job.logs_total - job.logs.length + 1;
    return h("div", {},
      first > 1 ? h("p", { class: "muted small", text: `the newest ${job.logs.length} of ${job.logs_total} lines` }) : null,
      h("ol", { class: "logs", start: first }, ...job.logs.map((line) => h("li", { text: line }))));
  }
  if (tab === "error") {
    const all = traces(job);
    if (!job.failed_reason && !all.length) return h("p", { class: "muted", text: "This job has not failed." });
    return h("div", {},
      job.failed_reason ? h("p", { class: "reason-text", "data-field": "failed_reason", text: job.failed_reason }) : null,
      all.length ? all.map((trace, i) => h("div", {},
        all.length > 1 ? h("h3", { class: "small muted", text: i ? `attempt ${all.length - i}` : `attempt ${all.length} (latest)` }) : null,
        h("pre", { class: "stack", "data-field": "stacktrace", text: trace })))
        : h("p", { class: "muted", text: "No stack trace was stored." }));
  }
  const tree = await api(`${jpath(queue, job.id)}/flow`);
  if (!tree.children.length && !job.parent) return h("p", { class: "muted", text: "This job is not part of a flow." });
  return h("ul", { class: "tree", "aria-label": "flow" }, flowNode(tree, queue, job.id));
}

function flowNode(node, queue, id) {
  const here = node.queue === queue && node.id === id;
  return h("li", { class: here ? "here" : "", "data-node": `${node.queue}:${node.id}` },
    h("span", { class: "node" },
      h("span", { class: "pill s-" + node.state, text: LABELS[node.state] || node.state }),
      h("a", { href: `#/q/${enc(node.queue)}/job/${enc(node.id)}`, text: node.name }),
      h("span", { class: "muted mono", text: `${node.queue} #${node.id}` }),
      node.failed_reason ? h("span", { class: "c-failed small", text: node.failed_reason }) : null),
    node.children.length ? h("ul", {}, ...node.children.map((c) => flowNode(c, queue, id))) : null);
}

// ------------------------------------------------------------------ rendering
async function render() {
  const r = route();
  const seq = ++app.seq;
  crumbs(r);
  let nodes;
  try {
    if (r.view === "job") nodes = await jobView(r);
    else if (r.view === "queue") nodes = await queueView(r);
    else { await loadQueues(1000); nodes = overviewView(); }
  } catch (error) {
    if (seq !== app.seq) return;
    if (error.status === 404 && r.view === "job") {
      nodes = [h("p", { class: "empty", text: `Job ${r.id} is not in ${r.queue} (any more).` }),
        h("p", {}, h("a", { href: `#/q/${enc(r.queue)}`, text: `Back to ${r.queue}` }))];
    } else {
      throw error;
    }
  }
  if (seq !== app.seq) return; // a newer render started meanwhile
  const view = document.getElementById("view");
  const focused = document.activeElement && view.contains(document.activeElement) ? focusKey(document.activeElement) : null;
  const typed = document.getElementById("job-search");
  const draft = typed && document.activeElement === typed ? typed.value : null;
  view.replaceChildren(...nodes.filter(Boolean));
  view.dataset.view = r.view;
  if (draft !== null) {
    const input = document.getElementById("job-search");
    if (input) { input.value = draft; input.focus(); }
  } else if (focused) {
    const again = view.querySelector(focused);
    if (again) again.focus();
  }
  renderSidebar(r.queue);
}

function focusKey(node) {
  // What lets the same control be found after a re-render (keyboard users keep their place).
  if (node.id) return "#" + CSS.escape(node.id);
  const href = node.getAttribute("href");
  if (href) return `a[href="${CSS.escape(href)}"]`;
  const item = node.closest("[data-job]");
  if (node.dataset.tab && item) return `[data-job="${CSS.escape(item.dataset.job)}"] [data-tab="${CSS.escape(node.dataset.tab)}"]`;
  const action = node.dataset.action;
  if (action) return (item ? `[data-job="${CSS.escape(item.dataset.job)}"] ` : "") + `[data-action="${CSS.escape(action)}"]`;
  return null;
}

let refreshing = null;
let again = false;
async function refresh() {
  // One render at a time; a refresh asked for meanwhile runs once after it.
  if (refreshing) { again = true; return refreshing; }
  refreshing = (async () => {
    do {
      again = false;
      if (document.getElementById("confirm").open) break; // never pull the page from under a question
      try {
        await render();
        clearReadError();
      } catch (error) {
        if (document.getElementById("error").dataset.sticky !== "yes") showError(error);
      }
    } while (again);
  })();
  try { await refreshing; } finally { refreshing = null; }
}

let eventTimer = null;
function onStoreEvent(batch) {
  // Events come in bursts (a worker finishing many jobs): one re-read per 200 ms at most.
  // A job's page re-reads only for events of that job.
  const r = route();
  const kept = metricsCache.get(r.queue);
  if (kept && batch && (batch.count > batch.events.length
      || batch.events.some((e) => e.event === "completed" || e.event === "failed"))) {
    kept.stale = true;
  }
  if (r.view === "job" && batch && batch.count === batch.events.length
      && !batch.events.some((e) => String(e.jobId) === r.id)) {
    loadQueues().then(() => renderSidebar(r.queue), () => {});
    return;
  }
  if (eventTimer) return;
  eventTimer = setTimeout(async () => {
    eventTimer = null;
    await Promise.all([loadQueues().catch(() => {}), refresh()]);
  }, 200);
}

// ------------------------------------------------------------------ live stream
function setLive(live, why) {
  const badge = document.getElementById("live");
  badge.dataset.live = live ? "yes" : "no";
  badge.textContent = live ? "live" : route().queue ? `polling every ${POLL_MS / 1000} s` : "refreshing every 5 s";
  badge.title = live ? "updates pushed by the server (server-sent events)" : why || "";
}

function watch(queue) {
  if (app.stream && app.stream.queue === queue) return;
  if (app.stream) app.stream.controller.abort();
  app.stream = null;
  if (!queue) { setLive(false); return; }
  const controller = new AbortController();
  const stream = { queue, controller, live: false };
  app.stream = stream;
  readStream(stream).catch(() => {});
}

async function readStream(stream) {
  const headers = {};
  if (token) headers.Authorization = "Bearer " + token;
  try {
    const reply = await fetch(`${qpath(stream.queue)}/events`, { headers, signal: stream.controller.signal });
    if (!reply.ok || !reply.body) throw new Error(`events: ${reply.status}`);
    const reader = reply.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const message = parseEvent(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
        if (message.event === "ready") { stream.live = true; setLive(true); onStoreEvent(); }
        else if (message.event === "jobs") onStoreEvent(message.data);
      }
    }
    throw new Error("the event stream ended");
  } catch (error) {
    if (stream.controller.signal.aborted) return;
    stream.live = false;
    setLive(false, String(error.message || error));
    setTimeout(() => {
      if (app.stream === stream) { app.stream = null; watch(route().queue); }
    }, RETRY_STREAM_MS);
  }
}

function parseEvent(chunk) {
  const message = { event: "message", data: null };
  const data = [];
  for (const line of chunk.split("\n")) {
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") message.event = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return { event: "comment" };
  try { message.data = JSON.parse(data.join("\n")); } catch (_) { message.data = data.join("\n"); }
  return message;
}

// ------------------------------------------------------------------ timers and start
let pollTimer = null;
function schedulePoll() {
  clearTimeout(pollTimer);
  const r = route();
  const live = app.stream && app.stream.live;
  const delay = r.view === "overview" ? OVERVIEW_MS : live ? OVERVIEW_MS : POLL_MS;
  pollTimer = setTimeout(async () => {
    if (live && r.view !== "overview") await loadQueues().then(() => renderSidebar(r.queue), showError);
    else await refresh();
    schedulePoll();
  }, delay);
}

async function onRoute() {
  const r = route();
  showError(null);
  watch(r.view === "overview" ? null : r.queue);
  document.getElementById("sidebar").classList.remove("open");
  document.getElementById("menu").setAttribute("aria-expanded", "false");
  await refresh();
  schedulePoll();
}

function tickTimes() {
  // Relative times age between refreshes ("just now" becomes "2 min ago").
  for (const node of document.querySelectorAll("#view time[datetime]")) {
    node.textContent = ago(Date.parse(node.getAttribute("datetime")));
  }
}

function start() {
  setInterval(tickTimes, 10000);
  document.getElementById("filter").addEventListener("input", () => renderSidebar(route().queue));
  document.getElementById("menu").addEventListener("click", () => {
    const open = document.getElementById("sidebar").classList.toggle("open");
    document.getElementById("menu").setAttribute("aria-expanded", String(open));
    if (open) document.getElementById("filter").focus();
  });
  document.addEventListener("keydown", (event) => {
    const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement.tagName);
    if (event.key === "/" && !typing && !event.ctrlKey && !event.metaKey) {
      event.preventDefault();
      const sidebar = document.getElementById("sidebar");
      if (getComputedStyle(sidebar).display === "none") document.getElementById("menu").click();
      document.getElementById("filter").focus();
    }
  });
  window.addEventListener("hashchange", onRoute);
  setLive(false, "connecting");
  Promise.all([
    api("/api/config").then((config) => {
      app.readOnly = config.read_only;
      app.skew = config.now - Date.now();
      document.getElementById("mode").hidden = !app.readOnly;
    }),
    loadQueues(),
  ]).catch(showError).finally(onRoute);
}

start();
