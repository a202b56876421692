// jobnik console: live regions over the /v1 SSE streams, confirmed /v1 commands, queues.
"use strict";

const HEADERS = { "X-Jobnik-Console": "1" };  // the cookie's writes need it (docs/security.md)

function notice(text) {
  document.getElementById("notice").textContent = text;
}

// -- live regions: #live is fetched again (this page's own URL) when its stream says something
let source = null;
let timer = null;

function follow() {
  const live = document.getElementById("live");
  if (source) { source.close(); source = null; }
  if (!live || !live.dataset.stream) return;
  source = new EventSource(live.dataset.stream);
  const onEvent = (e) => {
    if (e.lastEventId) live.dataset.position = e.lastEventId;
    if (!timer) timer = setTimeout(refresh, live.dataset.stream.startsWith("/v1/events") ? 2000 : 300);
  };
  for (const type of (live.dataset.eventTypes || "").split(",")) {
    if (type) source.addEventListener(type, onEvent);
  }
  source.onerror = () => {
    // the job's stream ends with the job: refresh once to show the end, and stop following
    if (source && source.readyState !== EventSource.OPEN) { source.close(); source = null; refresh(); }
  };
}

async function refresh() {
  timer = null;
  const response = await fetch(location.href, { headers: HEADERS, credentials: "same-origin" });
  if (!response.ok) return;
  const html = new DOMParser().parseFromString(await response.text(), "text/html");
  const fresh = html.getElementById("live");
  const live = document.getElementById("live");
  if (!fresh || !live) return;
  const path = (s) => (s || "").split("?")[0];
  const stream = path(live.dataset.stream);
  live.replaceWith(fresh);
  bindActions(fresh);
  showOldest();
  // the open stream carries on; follow again when there is none (a rerun reopened the job)
  if (path(fresh.dataset.stream) !== stream || !source) follow();
}

// -- actions: a confirmation with a reason, then the /v1 command
let pending = null;

function bindActions(root) {
  for (const button of root.querySelectorAll("button.action")) {
    button.addEventListener("click", () => ask(button));
  }
}

function ask(button) {
  pending = button;
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = button.textContent.trim();
  document.getElementById("confirm-text").textContent = button.dataset.confirm;
  document.getElementById("confirm-priority").hidden = !button.dataset.priority;
  document.getElementById("confirm-error").textContent = "";
  document.getElementById("confirm-reason").value = "";
  dialog.showModal();
  document.getElementById(button.dataset.priority ? "confirm-priority-value" : "confirm-reason").focus();
}

async function send(event) {
  event.preventDefault();
  const button = pending;
  const reason = document.getElementById("confirm-reason").value.trim();
  const error = document.getElementById("confirm-error");
  if (!reason) { error.textContent = "Say why: the reason is recorded on the event."; return; }
  const method = button.dataset.method;
  let url = button.dataset.url;
  const init = { method, headers: { ...HEADERS }, credentials: "same-origin" };
  if (method === "DELETE") {
    url += "?reason=" + encodeURIComponent(reason);
  } else {
    const body = JSON.parse(button.dataset.body || "{}");
    body.reason = reason;
    if (button.dataset.priority) body.priority = document.getElementById("confirm-priority-value").value;
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const ok = document.getElementById("confirm-ok");
  ok.disabled = true;
  try {
    const response = await fetch(url, init);
    if (!response.ok) {
      let message = response.statusText;
      try { const answer = await response.json(); message = `${answer.code}: ${answer.message}`; } catch (_) { /* not JSON */ }
      error.textContent = message;
      return;
    }
    document.getElementById("confirm").close();
    notice(`${button.textContent.trim()}: done.`);
    if (button.dataset.after) { location.assign(button.dataset.after); return; }
    await refresh();
  } finally {
    ok.disabled = false;
  }
}

// -- queues: /v1/queues and /v1/stuck polled; throughput from successive `completed` counts
const WINDOW_MS = 5 * 60 * 1000;
const samples = new Map();  // stage type -> [[time, completed], ...] within WINDOW_MS

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "—" : String(text);
  row.appendChild(td);
  return td;
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return `${Math.round(seconds / 3600)} h`;
}

function time(iso) { return iso ? iso.replace("T", " ").replace(/\..*$/, "").replace("Z", "") : "—"; }

function throughput(type, completed, now) {
  const kept = (samples.get(type) || []).filter(([t]) => now - t <= WINDOW_MS);
  kept.push([now, completed]);
  samples.set(type, kept);
  const [t0, c0] = kept[0];
  if (now - t0 < 1000) return null;
  return ((completed - c0) / ((now - t0) / 60000)).toFixed(1);
}

async function poll(url, section, fill) {
  const table = section.querySelector("tbody");
  const unavailable = section.querySelector(".unavailable");
  let response;
  try { response = await fetch(url, { credentials: "same-origin" }); } catch (_) { return; }
  if (response.status === 404) {
    unavailable.hidden = false;
    unavailable.textContent = `Not available: this server has no ${url} (it answered 404).`;
    section.querySelector("table").hidden = true;
    return;
  }
  if (!response.ok) { unavailable.hidden = false; unavailable.textContent = `${url} answered ${response.status}.`; return; }
  unavailable.hidden = true;
  section.querySelector("table").hidden = false;
  const items = (await response.json()).items || [];
  table.replaceChildren();
  if (!items.length) { cell(table.insertRow(), "None.").colSpan = 8; return; }
  for (const item of items) fill(table.insertRow(), item);
}

function jobLink(row, id) {
  const td = cell(row, "");
  if (!id) { td.textContent = "—"; return; }
  const a = document.createElement("a");
  a.href = `/ui/jobs/${id}`;
  a.textContent = id.slice(0, 8);
  td.appendChild(a);
}

// each stage type's oldest queued task, as the last poll of /v1/queues saw it, on its chart card
const oldest = new Map();

function showOldest() {
  for (const card of document.querySelectorAll(".card[data-stage-type]")) {
    const seconds = oldest.get(card.dataset.stageType);
    card.querySelector(".oldest").textContent = seconds === undefined ? "—" : age(seconds);
  }
}

async function pollQueues(root) {
  const now = Date.now();
  const [queues, stuck] = root.querySelectorAll("section");
  oldest.clear();
  await poll(root.dataset.queues, queues, (row, q) => {
    oldest.set(q.stageType, q.oldestQueuedAgeSeconds);
    row.dataset.stageType = q.stageType;
    cell(row, q.stageType); cell(row, q.queued); cell(row, age(q.oldestQueuedAgeSeconds));
    cell(row, q.inProgress); cell(row, q.completed); cell(row, q.failed);
    cell(row, throughput(q.stageType, q.completed, now)).className = "throughput";
    cell(row, time(q.lastDequeueAt));
  });
  showOldest();
  await poll(root.dataset.stuck, stuck, (row, s) => {
    cell(row, s.kind); cell(row, s.reason); cell(row, time(s.since)); jobLink(row, s.jobId);
    cell(row, s.stageId ? s.stageId.slice(0, 8) : null); cell(row, s.taskId ? s.taskId.slice(0, 8) : null);
    cell(row, s.stageType);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  bindActions(document);
  follow();
  document.getElementById("confirm-form").addEventListener("submit", send);
  document.getElementById("confirm-cancel").addEventListener("click", () => document.getElementById("confirm").close());
  const queues = document.getElementById("queues");
  if (queues) { pollQueues(queues); setInterval(() => pollQueues(queues), 5000); }
  const live = document.getElementById("live");
  if (live && live.dataset.refresh) setInterval(refresh, Number(live.dataset.refresh) * 1000);
});
