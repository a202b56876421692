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
  const kept = new Set(selected().map((box) => box.dataset.select));
  for (const box of fresh.querySelectorAll("input[data-select]")) box.checked = kept.has(box.dataset.select);
  live.replaceWith(fresh);
  counted();
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

// -- bulk actions: the same /v1 command sent for each selected row, with the one reason
function selected() {
  return [...document.querySelectorAll("input[data-select]:checked")];
}

function counted() {
  const count = document.getElementById("selected-count");
  if (!count) return;
  const n = selected().length;
  count.textContent = n ? `${n} selected` : "No job selected";
  const all = document.querySelector("input[data-select-all]");
  const boxes = document.querySelectorAll("input[data-select]");
  if (all) all.checked = boxes.length > 0 && n === boxes.length;
}

document.addEventListener("change", (event) => {
  if (event.target.matches("input[data-select-all]")) {
    for (const box of document.querySelectorAll("input[data-select]")) box.checked = event.target.checked;
  }
  if (event.target.matches("input[data-select], input[data-select-all]")) counted();
});

function ask(button) {
  if (button.dataset.bulk && !selected().length) {
    notice("Select one or more jobs first.");
    return;
  }
  pending = button;
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = button.textContent.trim();
  document.getElementById("confirm-text").textContent =
    button.dataset.confirm.replace("{n}", String(selected().length));
  document.getElementById("confirm-priority").hidden = !button.dataset.priority;
  document.getElementById("confirm-period").hidden = !button.dataset.period;
  if (button.dataset.period) document.getElementById("confirm-period-value").value = button.dataset.period;
  document.getElementById("confirm-error").textContent = "";
  document.getElementById("confirm-reason").value = "";
  dialog.showModal();
  document.getElementById(button.dataset.priority ? "confirm-priority-value" : "confirm-reason").focus();
}

function request(button, reason) {
  const init = { method: button.dataset.method, headers: { ...HEADERS }, credentials: "same-origin" };
  let url = button.dataset.url;
  // (a name typed on the page completes the URL: a retention period for a new job name)
  if (button.dataset.nameFrom) url += encodeURIComponent(document.querySelector(button.dataset.nameFrom).value.trim());
  if (button.dataset.urlTail) url += button.dataset.urlTail;  // (after the name: /v1/limits/NAME/order)
  if (init.method === "DELETE") {
    url += "?reason=" + encodeURIComponent(reason);
  } else {
    const body = JSON.parse(button.dataset.body || "{}");
    body.reason = reason;
    if (button.dataset.priority) body.priority = document.getElementById("confirm-priority-value").value;
    if (button.dataset.period) body.periodSeconds = Math.round(Number(document.getElementById("confirm-period-value").value) * 86400);
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  return [url, init];
}

async function refused(response) {
  try { const answer = await response.json(); return `${answer.code}: ${answer.message}`; } catch (_) { return response.statusText; }
}

// Each selected row's command in turn (one at a time: the server sees an operator, not a burst);
// returns the refusals, "name (id): code: message", whose rows stay selected.
async function sendEach(button, reason) {
  const [template, init] = request(button, reason);
  const failures = [];
  for (const box of selected()) {
    const id = box.dataset.select;
    const response = await fetch(template.replace("{id}", id), init);
    if (response.ok) box.checked = false;  // done: a second try sends only the refused ones
    else failures.push(`${box.dataset.name} (${id.slice(0, 8)}): ${await refused(response)}`);
  }
  return failures;
}

async function send(event) {
  event.preventDefault();
  const button = pending;
  const reason = document.getElementById("confirm-reason").value.trim();
  const error = document.getElementById("confirm-error");
  if (!reason) { error.textContent = "Say why: the reason is recorded on the event."; return; }
  const ok = document.getElementById("confirm-ok");
  ok.disabled = true;
  try {
    const label = button.textContent.trim();
    if (button.dataset.bulk) {
      const total = selected().length;
      const failures = await sendEach(button, reason);
      counted();
      await refresh();
      if (failures.length) {
        error.textContent = `${total - failures.length} of ${total} done. Refused: ${failures.join("; ")}`;
        return;
      }
      document.getElementById("confirm").close();
      notice(`${label}: done for ${total} job${total === 1 ? "" : "s"}.`);
      return;
    }
    const [url, init] = request(button, reason);
    const response = await fetch(url, init);
    if (!response.ok) { error.textContent = await refused(response); return; }
    document.getElementById("confirm").close();
    notice(`${label}: done.`);
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
    // the stage type, marked when its jobs take turns ("render · fair")
    cell(row, q.order === "fair" ? `${q.stageType} · fair` : q.stageType);
    cell(row, q.queued); cell(row, age(q.oldestQueuedAgeSeconds));
    // running, and the stage type's concurrency limit when it has one ("2 / 3")
    cell(row, q.maxInProgress == null ? q.inProgress : `${q.inProgress} / ${q.maxInProgress}`);
    cell(row, q.completed); cell(row, q.failed);
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
