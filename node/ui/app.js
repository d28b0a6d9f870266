// Troupe's dashboard: a single page over the node's JSON API, with hash routes.
//
// Everything that comes from the API (model output, tool results, arguments, IDs)
// is untrusted: it is only ever set as text (textContent, attribute values through
// the DOM), never parsed as HTML.

import { barChart } from "./chart.js";
import { extend, layOut } from "./timeline.js";

const main = document.getElementById("main");
// The login's cookies (node/uisession.go): the session is HttpOnly; the CSRF value
// is for this page to send back on the calls that change something.
const CSRF_COOKIE = "troupe_csrf";
const CSRF_HEADER = "X-Troupe-CSRF";

// --- DOM ------------------------------------------------------------------

// el builds an element: attrs are properties or attributes (on* handlers as
// functions), children are nodes or strings (set as text).
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (k === "dataset") Object.assign(e.dataset, v);
    else if (k in e && typeof v !== "string") e[k] = v;
    else e.setAttribute(k, String(v));
  }
  append(e, children);
  return e;
}

function append(parent, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    parent.append(c instanceof Node ? c : document.createTextNode(visible(String(c))));
  }
  return parent;
}

// INVISIBLE matches the characters that change how text around them reads without
// showing themselves: bidi embeddings, overrides, isolates and marks, zero-width
// spaces, word joiners and byte-order marks.
const INVISIBLE = /[\u061c\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/g;

// visible shows each INVISIBLE character as [U+XXXX]: what a model or a tool
// says may hide one in a call's arguments, and the text shown must read as the
// tool gets it (an argument "\u202emoc.elpmaxe@eve" would otherwise read as
// "eve@example.com" on the approvals page).
const visible = (s) => s.replace(INVISIBLE, (ch) => "[U+" + ch.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + "]");

function render(...children) {
  main.replaceChildren();
  append(main, children);
}

// errorFrom is what the error shown came from (a poll's function, say), or null.
let errorFrom = null;

// showError shows err (hides the box when err is null); from names what it came
// from, so that its next success takes it away (clearError).
function showError(err, from = null) {
  const box = document.getElementById("error");
  errorFrom = err ? from : null;
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  box.hidden = false;
  box.textContent = String(err.message || err);
}

// clearError hides the error shown when it came from from: what failed has
// worked since (a poll that failed while the node restarted answers again), and
// what the page shows is current.
function clearError(from) {
  if (from !== null && errorFrom === from) showError(null);
}

const badge = (status) => el("span", { class: "badge " + status }, status || "?");
const link = (href, text) => el("a", { href }, text);
const sessionLink = (id) => link("#/sessions/" + encodeURIComponent(id), id);
// waitingBadge links a session whose calls wait for approval (its row's waiting
// names their tools) to its page, where they are answered; null when none waits.
const waitingBadge = (s) => (s.waiting || []).length
  ? el("a", { class: "badge waiting", href: "#/sessions/" + encodeURIComponent(s.session_id),
    title: "waiting for approval: " + s.waiting.join(", ") }, "waiting for approval")
  : null;

// --- formatting -------------------------------------------------------------

const fmtTime = (us) => (us ? new Date(us / 1000).toLocaleString() : "");
const fmtInt = (n) => (n || 0).toLocaleString();
const fmtCost = (c) => (c ? "$" + c.toFixed(c < 0.01 ? 5 : 3) : "");
function fmtDur(us) {
  if (!us) return "";
  if (us < 1000) return us + "µs";
  if (us < 1e6) return (us / 1000).toFixed(us < 1e4 ? 1 : 0) + "ms";
  if (us < 6e7) return (us / 1e6).toFixed(2) + "s";
  return (us / 6e7).toFixed(1) + "min";
}
function clip(s, n = 160) {
  s = String(s ?? "").replace(/\s+/g, " ");
  return s.length > n ? s.slice(0, n - 1) + "…" : s;
}

// --- API ------------------------------------------------------------------

class AuthNeeded extends Error {
  constructor() { super("this node asks for a token: log in above"); }
}

// csrf is the CSRF value of the login, from its cookie ("" when not logged in).
function csrf() {
  for (const c of document.cookie.split(";")) {
    const [k, ...v] = c.trim().split("=");
    if (k === CSRF_COOKIE) return decodeURIComponent(v.join("="));
  }
  return "";
}

// request calls the API, signed in by the session cookie the browser sends; calls
// that change something carry the login's CSRF value.
async function request(path, opts = {}) {
  const headers = new Headers(opts.headers || {});
  const method = (opts.method || "GET").toUpperCase();
  if (method !== "GET" && method !== "HEAD" && csrf()) headers.set(CSRF_HEADER, csrf());
  const r = await fetch(path, { ...opts, headers, credentials: "same-origin" });
  if (r.status === 401) {
    askToken();
    throw new AuthNeeded();
  }
  return r;
}

// api fetches JSON; a refusal is an Error with the API's reason.
async function api(path, opts = {}) {
  const r = await request(path, opts);
  let body = null;
  try { body = await r.json(); } catch { /* no JSON */ }
  if (!r.ok) throw new Error(`${opts.method || "GET"} ${path}: ${r.status} ${(body && body.error) || r.statusText}`);
  return body;
}

function askToken() {
  const form = document.getElementById("token");
  form.hidden = false;
  document.getElementById("logout").hidden = true;
  document.getElementById("token-input").focus();
}

function showLogout() {
  document.getElementById("logout").hidden = !csrf();
}

// The login form trades the token for the session cookie (POST /v1/auth/login):
// the token itself is kept nowhere in the page.
document.getElementById("token").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const input = document.getElementById("token-input");
  const t = input.value.trim();
  if (!t) return;
  const r = await fetch("/v1/auth/login", { method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json" }, body: JSON.stringify({ token: t }) });
  input.value = "";
  if (!r.ok) {
    let body = null;
    try { body = await r.json(); } catch { /* no JSON */ }
    showError(`log in: ${r.status} ${(body && body.error) || r.statusText}`);
    input.focus();
    return;
  }
  document.getElementById("token").hidden = true;
  showLogout();
  route();
});

document.getElementById("logout").addEventListener("click", async () => {
  try {
    await request("/v1/auth/logout", { method: "POST" });
  } catch (err) {
    if (!(err instanceof AuthNeeded)) { showError(err); return; }
  }
  cleanup();
  cleanup = () => {};
  render(el("p", { class: "muted" }, "Logged out."));
  askToken();
});

// stream reads a session's Server-Sent Events with fetch, from seq after on;
// onEvent gets each event's type and parsed data. It stops when signal aborts.
async function stream(id, after, onEvent, signal) {
  const headers = {};
  if (after) headers["Last-Event-ID"] = String(after);
  const r = await request("/v1/sessions/" + encodeURIComponent(id) + "/stream", { headers, signal });
  if (!r.ok || !r.body) throw new Error(`stream ${id}: ${r.status}`);
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let type = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) type = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (!data.length) continue; // a keep-alive comment
      let parsed;
      try { parsed = JSON.parse(data.join("\n")); } catch { continue; }
      onEvent(type, parsed);
    }
  }
}

// --- routing --------------------------------------------------------------

// cleanup stops the current page's polling and streams.
let cleanup = () => {};

function route() {
  cleanup();
  cleanup = () => {};
  showError(null);
  const hash = location.hash.replace(/^#\/?/, "");
  const [page, ...rest] = hash.split("/");
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("active", a.dataset.route === (page || "sessions"));
  }
  const ctl = new AbortController();
  const stops = [() => ctl.abort()];
  cleanup = () => stops.forEach((f) => f());
  const every = (ms, f) => {
    let timer;
    const tick = async () => {
      if (ctl.signal.aborted) return;
      try {
        await f();
        clearError(f);
      } catch (err) {
        if (!ctl.signal.aborted) showError(err, f);
      }
      if (!ctl.signal.aborted) timer = setTimeout(tick, ms);
    };
    stops.push(() => clearTimeout(timer));
    return tick();
  };
  const ctx = { signal: ctl.signal, every };
  let done;
  switch (page) {
    case "":
    case "sessions":
      // #/sessions/ID[/SEQ]: a session's timeline, with event SEQ shown (session IDs
      // have no "/").
      if (!rest.length) {
        done = sessionsPage(ctx);
        break;
      }
      try {
        done = sessionPage(decodeURIComponent(rest[0]), Number(rest[1]) || 0, ctx);
      } catch {
        // A malformed escape (a link cut short): no session's page, and not the
        // one shown before either.
        render(el("p", {}, "No such page: the session's ID in the address is not well formed. ", link("#/sessions", "Sessions")));
        return;
      }
      break;
    case "charts":
      done = chartsPage(ctx);
      break;
    case "approvals":
      done = approvalsPage(ctx);
      break;
    default:
      render(el("p", {}, "No such page. ", link("#/sessions", "Sessions")));
      return;
  }
  Promise.resolve(done).catch((err) => { if (!ctl.signal.aborted) showError(err); });
}

window.addEventListener("hashchange", route);

// --- sessions ---------------------------------------------------------------

const sessionFilters = { status: "", agent: "", since: "24h" };

function select(value, options, onchange) {
  const s = el("select", { onchange: () => onchange(s.value) });
  for (const [v, label] of options) s.append(el("option", { value: v, selected: v === value }, label));
  return s;
}

// SESSIONS_POLL_MS is how often the sessions list is fetched again as a safety net:
// the feed (GET /v1/feed/sessions) pushes its changes. ?poll=SECONDS in the page's
// address sets it (the browser tests make it huge, to see the push alone), from 1 s
// to a day: a timer of 0 or less, or past 2^31 ms, would fire at once, and the page
// would fetch the list in a loop.
const SESSIONS_POLL_MS = (() => {
  const s = Number(new URLSearchParams(location.search).get("poll"));
  return (s >= 1 ? Math.min(s, 86400) : 60) * 1000;
})();

// sessionFeed reads GET /v1/feed/sessions?query with an EventSource (the login's
// cookie signs it in) and reconnects with a growing backoff after an error.
// onOpen runs each time it is connected (the page lists the sessions then: nothing
// is sent on connect), onRow with each changed session's row, onResync when
// changes were dropped. It stops when signal aborts; the returned function stops
// it too.
function sessionFeed(query, { onOpen, onRow, onResync }, signal) {
  let es = null, timer = 0, backoff = 1000, stopped = false;
  const stop = () => {
    stopped = true;
    clearTimeout(timer);
    if (es) es.close();
  };
  const connect = () => {
    if (stopped || signal.aborted) return;
    es = new EventSource("/v1/feed/sessions" + (query ? "?" + query : ""));
    es.onopen = () => { backoff = 1000; onOpen(); };
    es.addEventListener("session", (ev) => {
      let row;
      try { row = JSON.parse(ev.data); } catch { return; }
      onRow(row);
    });
    es.addEventListener("resync", () => onResync());
    es.onerror = () => {
      // Reconnect ourselves: EventSource gives up on an HTTP error (401, 503).
      es.close();
      onOpen(false);
      if (stopped || signal.aborted) return;
      timer = setTimeout(connect, backoff);
      backoff = Math.min(backoff * 2, 30000);
    };
  };
  signal.addEventListener("abort", stop);
  connect();
  return stop;
}

// LIST_LIMIT is how many sessions the list shows: the latest started.
const LIST_LIMIT = 200;

// AGENT_NAME is what names an agent (the node's rule, AgentNameRule), or
// "default": the list asks the node for the sessions of such a name only (the
// node refuses another), and shows none for another.
const AGENT_NAME = /^(?:[a-z][a-z0-9_-]{0,63}|default)$/;

async function sessionsPage({ every, signal }) {
  const tbody = el("tbody");
  const agents = el("datalist", { id: "agents" });
  const count = el("span", { class: "muted", id: "sessions-count" });
  // The agent filter is the node's (GET /v1/sessions?agent=): the latest
  // LIST_LIMIT sessions of that agent, however old, not those of the latest
  // LIST_LIMIT sessions of all. The rows shown are filtered at once as it is
  // typed; the list and the feed are asked again once the typing pauses.
  let agentTimer = 0;
  const agentInput = el("input", { list: "agents", placeholder: "any agent", value: sessionFilters.agent,
    oninput: () => {
      sessionFilters.agent = agentInput.value.trim();
      draw();
      clearTimeout(agentTimer);
      agentTimer = setTimeout(() => { if (!signal.aborted) { listen(); relist(); } }, 300);
    } });
  signal.addEventListener("abort", () => clearTimeout(agentTimer));
  // knownAgents are the agents of the sessions listed so far, offered as the
  // filter's choices: a list of one agent's sessions names no other.
  const knownAgents = new Set();
  render(
    el("h1", {}, "Sessions"),
    el("div", { class: "filters" },
      el("label", {}, "Status ", select(sessionFilters.status,
        [["", "any"], ["running", "running"], ["completed", "completed"], ["failed", "failed"]],
        (v) => { sessionFilters.status = v; listen(); relist(); })),
      el("label", {}, "Agent ", agentInput, agents),
      el("label", {}, "Started within ", select(sessionFilters.since,
        [["1h", "1 hour"], ["24h", "24 hours"], ["168h", "7 days"], ["720h", "30 days"], ["", "any time"]],
        (v) => { sessionFilters.since = v; listen(); relist(); })),
      count),
    el("table", {},
      el("thead", {}, el("tr", {},
        el("th", {}, "Session"), el("th", {}, "Status"), el("th", {}, "Agent"), el("th", {}, "Started"),
        el("th", { class: "num" }, "Steps"), el("th", { class: "num" }, "Tokens"), el("th", { class: "num" }, "Cost"),
        el("th", {}, "Parent"))),
      tbody));
  let rows = [];
  let live = false;
  const draw = () => {
    const shown = rows.filter((s) => !sessionFilters.agent || s.agent === sessionFilters.agent);
    tbody.replaceChildren(...shown.map((s) => el("tr", { dataset: { session: s.session_id } },
      el("td", {}, sessionLink(s.session_id)),
      el("td", {}, badge(s.status), waitingBadge(s)),
      el("td", {}, s.agent || ""),
      el("td", {}, fmtTime(s.started_us)),
      el("td", { class: "num" }, fmtInt(s.steps)),
      el("td", { class: "num" }, fmtInt(s.usage.prompt_tokens + s.usage.completion_tokens)),
      el("td", { class: "num" }, fmtCost(s.usage.cost_usd)),
      el("td", {}, s.parent ? sessionLink(s.parent) : ""))));
    if (!shown.length) tbody.append(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "No sessions.")));
    count.textContent = `${shown.length} shown` + (live ? " · live" : "");
    for (const s of rows) if (s.agent) knownAgents.add(s.agent);
    agents.replaceChildren(...[...knownAgents].sort().map((a) => el("option", { value: a })));
  };
  // upsert applies a session's row from the feed: the list keeps the latest
  // started first, a row leaves when it no longer has the status asked for, and a
  // row older than the one shown (a change that overtook a list) is ignored.
  const upsert = (row) => {
    const i = rows.findIndex((s) => s.session_id === row.session_id);
    if (i >= 0 && rows[i].last_seq > row.last_seq) return;
    if ((sessionFilters.status && row.status !== sessionFilters.status) ||
      (sessionFilters.agent && row.agent !== sessionFilters.agent)) {
      if (i >= 0) rows.splice(i, 1);
      return;
    }
    if (i >= 0) { rows[i] = row; return; }
    const at = rows.findIndex((s) => s.started_us < row.started_us ||
      (s.started_us === row.started_us && s.session_id > row.session_id));
    rows.splice(at < 0 ? rows.length : at, 0, row);
    // The latest LIST_LIMIT, as the list asks for: a page left open on a busy node
    // would take in every session the feed tells of.
    if (rows.length > LIST_LIMIT) rows.length = LIST_LIMIT;
  };
  // Changes that come while a list is fetched are applied again on top of it.
  const fetching = new Set();
  const refresh = async () => {
    const q = new URLSearchParams({ detail: "true", limit: String(LIST_LIMIT), sessions_only: "true" });
    if (sessionFilters.status) q.set("status", sessionFilters.status);
    if (sessionFilters.since) q.set("since", sessionFilters.since);
    const agent = sessionFilters.agent;
    if (agent) q.set("agent", agent);
    if (agent && !AGENT_NAME.test(agent)) { // no agent's name: no session has it
      rows = [];
      draw();
      return;
    }
    const during = [];
    fetching.add(during);
    try {
      rows = await api("/v1/sessions?" + q);
    } finally {
      fetching.delete(during);
    }
    during.forEach(upsert);
    draw();
  };
  // relist lists again (a filter changed, the feed connected or asked to): its
  // error is the poll's, taken away by the next list that comes.
  const relist = () => refresh().then(() => clearError(refresh),
    (err) => { if (!signal.aborted) showError(err, refresh); });
  let stopFeed = () => {};
  const listen = () => {
    stopFeed();
    const q = new URLSearchParams();
    if (sessionFilters.status) q.set("status", sessionFilters.status);
    if (sessionFilters.since) q.set("since", sessionFilters.since);
    if (AGENT_NAME.test(sessionFilters.agent)) q.set("agent", sessionFilters.agent);
    stopFeed = sessionFeed(q.toString(), {
      onOpen: (open = true) => {
        live = open;
        if (open) relist();
        else draw();
      },
      onRow: (row) => {
        for (const during of fetching) during.push(row);
        upsert(row);
        draw();
      },
      onResync: relist,
    }, signal);
  };
  listen();
  await every(SESSIONS_POLL_MS, refresh);
}

// --- a session's timeline -----------------------------------------------------

// typeClass colours an event type by its family.
function typeClass(t) {
  const fam = String(t).split(".")[0];
  return "type t-" + (["model", "tool", "task", "memory", "kb", "note", "approval"].includes(fam) ? fam : "other");
}

// describe says what an event is in one line, like `replay show`'s summaries, and
// what to show beside it (latency, tokens, cost).
function describe(e) {
  const p = e.payload || {};
  const extra = [];
  let text = "";
  switch (e.type) {
    case "task.submitted":
      text = "task: " + clip(p.input);
      if (p.agent) extra.push("agent " + p.agent);
      break;
    case "model.requested":
      text = `ask ${p.model}${p.purpose ? " to " + p.purpose : ""} (step ${p.step}, ${p.messages} messages)`;
      break;
    case "model.responded": {
      const calls = (p.message && p.message.tool_calls) || [];
      if (p.error) text = "error: " + clip(p.error);
      else if (calls.length) text = "call " + calls.map((c) => `${c.name}(${clip(c.arguments, 80)})`).join(", ");
      else text = "answer: " + clip(p.message && p.message.content);
      if (p.latency_us) extra.push(fmtDur(p.latency_us));
      if (p.usage) extra.push(`${fmtInt(p.usage.prompt_tokens)}+${fmtInt(p.usage.completion_tokens)} tokens`);
      if (p.usage && p.usage.cached_tokens) extra.push(fmtInt(p.usage.cached_tokens) + " cached");
      if (p.usage && p.usage.cost_usd) extra.push(fmtCost(p.usage.cost_usd));
      if (p.cached) extra.push("cache hit");
      break;
    }
    case "tool.requested":
      text = `${p.tool}(${clip(p.arguments)})`;
      if (p.chain_step) text = `step ${p.chain_step}: ` + text;
      break;
    case "tool.completed":
      text = p.error ? `${p.tool} → error: ${clip(p.error)}` : `${p.tool} → ${clip(p.result)}`;
      if (p.latency_us) extra.push(fmtDur(p.latency_us));
      break;
    case "approval.requested":
      text = `approval needed: ${p.tool}(${clip(p.arguments)})`;
      break;
    case "approval.resolved":
      text = (p.approve ? "approved" : "rejected") + (p.reason ? ": " + clip(p.reason) : "") + (p.by ? ` (by ${p.by})` : "");
      break;
    case "task.completed":
      text = "completed: " + clip(p.output) + (p.note ? ` (${clip(p.note)})` : "");
      break;
    case "task.failed":
      text = `failed (${p.reason}): ${clip(p.error)}`;
      break;
    case "team.state_updated":
      text = `team state ${p.op} ${p.section}.${p.key} by ${p.by}: ${clip(p.value)}`;
      break;
    default: {
      // Memory, knowledge, notes and any type this page does not know: its
      // payload's first text fields.
      const parts = [];
      for (const k of ["namespace", "tier", "op", "source", "reason", "text", "content", "id"]) {
        if (typeof p[k] === "string" && p[k]) parts.push(`${k}: ${clip(p[k], 60)}`);
      }
      text = parts.join(", ");
    }
  }
  return { text, extra };
}

// childOf is the child session a delegate call starts (node.ChildSessionID), for
// keys short enough to name it "<session>.sub<seq>".
function childOf(p) {
  if (p.tool !== "delegate" || !p.key) return "";
  const i = p.key.lastIndexOf("/");
  if (i < 0) return "";
  const id = p.key.slice(0, i) + ".sub" + p.key.slice(i + 1);
  return id.length <= 128 ? id : "";
}

function contextLine(c) {
  const kept = (c.kept || []).length, dropped = (c.dropped || []).length, trunc = (c.truncated || []).length;
  let s = `context: ${fmtInt(c.used)} of ${fmtInt(c.budget)} tokens (window ${fmtInt(c.window)}, system ${fmtInt(c.system)}, reserved ${fmtInt(c.reserved)}); ${kept} kept`;
  if (dropped) s += `, ${dropped} dropped`;
  if (trunc) s += `, ${trunc} truncated`;
  if (c.older) s += `, ${c.older} older turns`;
  if (c.over) s += `; over by ${fmtInt(c.over)}`;
  return s;
}

// A session's events are read EVENTS_PAGE at a time (GET …/events?from=&limit=):
// a long session's are tens of megabytes.
const EVENTS_PAGE = 2000;

function eventsPage(id, from) {
  return api(`/v1/sessions/${encodeURIComponent(id)}/events?from=${from}&limit=${EVENTS_PAGE}`);
}

// ROW_PX is the height of a timeline's row (an event, or the context line under
// a model call), which style.css fixes: the timeline draws only the rows in view
// (and OVERSCAN more either side), so a session of 100,000 events is as quick to
// show and to scroll as one of 100.
const ROW_PX = 28;
const OVERSCAN = 30;

// rowText is what the timeline's search matches in an event's row.
function rowText(e) {
  const { text, extra } = describe(e);
  return `#${e.seq} ${e.type} ${text} ${extra.join(" ")} ${e.actor}`.toLowerCase();
}

async function sessionPage(id, seq, { signal }) {
  const base = "/v1/sessions/" + encodeURIComponent(id);
  // The first page of events is drawn as soon as it comes, before the session's
  // status (which the node folds from all its events: seconds for a long one);
  // the other pages are read after it.
  const status = { status: "" };
  const statusRead = api(base);
  statusRead.catch(() => {}); // awaited below
  const events = await eventsPage(id, 1);
  if (!events.length) Object.assign(status, await statusRead); // no such session: its 404
  if (signal.aborted) return;
  let complete = events.length < EVENTS_PAGE;
  let selected = null;
  const detail = el("div", { class: "detail" }, el("p", { class: "muted" }, "Click an event to see its payload."));
  const rowsBox = el("div", { class: "rows" });
  const sizer = el("div", { class: "sizer" }, rowsBox);
  const tree = el("div", { class: "tree", onscroll: () => drawSoon() }, sizer);
  const found = el("span", { class: "muted", id: "find-status" });
  const findInput = el("input", { type: "search", id: "find", placeholder: "find an event (text, type or #seq)",
    onkeydown: (ev) => { if (ev.key === "Enter") { ev.preventDefault(); find(ev.shiftKey ? -1 : 1); } } });
  const finder = el("div", { class: "filters" }, findInput, found);
  // The head: the session's summary, the calls waiting for approval, the
  // timeline's title.
  const summary = el("div");
  const waiting = el("div");
  const waitingTable = approvalsTable(() => refreshStatus());
  const head = el("div", {}, summary, waiting, el("h2", {}, "Timeline"));
  const live = el("div", { class: "output delta", hidden: true });
  const liveLabel = document.getElementById("live");
  render(head, live, finder, el("div", { class: "split" }, tree, detail));

  let layout = layOut([]);
  let texts = []; // rowText by row, filled as the search needs them
  let drawn = ""; // the range of rows drawn, "first:last:layout"
  let generation = 0;

  const show = (e) => {
    selected = e.id;
    // A link to this event, without reloading the page.
    history.replaceState(null, "", "#/sessions/" + encodeURIComponent(id) + "/" + e.seq);
    for (const s of tree.querySelectorAll(".step.selected")) s.classList.remove("selected");
    const row = [...tree.querySelectorAll(".step")].find((s) => s.dataset.id === e.id);
    if (row) row.classList.add("selected");
    detail.replaceChildren(
      el("h2", {}, `#${e.seq} ${e.type}`),
      el("p", { class: "muted" }, `${e.actor} · ${fmtTime(e.ts)}`),
      el("pre", {}, JSON.stringify(e, null, 2)));
  };

  // reveal scrolls the timeline to an event's row, in the middle of the view.
  const reveal = (e) => {
    const at = layout.index.get(e.id);
    if (at === undefined) return;
    const top = at * ROW_PX, view = tree.clientHeight;
    if (top < tree.scrollTop || top + ROW_PX > tree.scrollTop + view) tree.scrollTop = Math.max(0, top - view / 2);
    drawRows();
  };

  // find selects the next event (dir 1) or the one before (-1) from the one
  // selected whose row says what the search box does; "#123" is event 123.
  const find = (dir) => {
    const q = findInput.value.trim().toLowerCase();
    if (!q) { found.textContent = ""; return; }
    const rows = layout.rows;
    const bySeq = /^#\d+$/.test(q) ? Number(q.slice(1)) : 0;
    const from = selected !== null && layout.index.has(selected) ? layout.index.get(selected) : (dir > 0 ? -1 : rows.length);
    for (let k = 1; k <= rows.length; k++) {
      const i = ((from + dir * k) % rows.length + rows.length) % rows.length;
      const r = rows[i];
      if (r.ctx) continue;
      if (bySeq ? r.e.seq !== bySeq : !(texts[i] ??= rowText(r.e)).includes(q)) continue;
      show(r.e);
      reveal(r.e);
      found.textContent = `#${r.e.seq}` + (complete ? "" : " (still reading the session's events)");
      return;
    }
    found.textContent = "not found" + (complete ? "" : " yet (still reading the session's events)");
  };

  const drawHead = () => {
    let usage = { prompt_tokens: 0, completion_tokens: 0, cost_usd: 0 };
    let agent = "default", parent = "";
    for (const e of events) {
      const p = e.payload || {};
      if (e.type === "model.responded" && p.usage) {
        usage.prompt_tokens += p.usage.prompt_tokens || 0;
        usage.completion_tokens += p.usage.completion_tokens || 0;
        usage.cost_usd += p.usage.cost_usd || 0;
      }
      if (e.type === "task.submitted" && e.seq === 1) {
        agent = p.agent || "default";
        if (p.parent) parent = p.parent.session_id;
      }
    }
    const stat = (label, v) => el("div", {}, el("span", {}, label), v);
    summary.replaceChildren();
    append(summary, [
      el("h1", {}, "Session ", el("span", { id: "session-id" }, id)),
      el("div", { class: "summary" },
        stat("Status", status.status ? badge(status.status) : "…"),
        stat("Agent", agent),
        stat("Events", el("span", { id: "events-count" }, fmtInt(events.length) + (complete ? "" : "+ (reading…)"))),
        stat("Tokens", `${fmtInt(usage.prompt_tokens)} + ${fmtInt(usage.completion_tokens)}`),
        stat("Cost", fmtCost(usage.cost_usd) || "—"),
        stat("Started", fmtTime(events.length && events[0].ts)),
        parent ? stat("Parent", sessionLink(parent)) : null),
      status.output ? el("div", {}, el("h2", {}, "Answer"), el("div", { class: "output", id: "answer" }, status.output)) : null,
      status.error ? el("div", {}, el("h2", {}, "Error"), el("div", { class: "output error" }, status.error)) : null]);
    // The calls waiting, in the one table of the page that keeps the row of each
    // call still waiting (as the approvals page does): each event that comes in
    // redraws the head, and a reason being typed would go, and its box lose the
    // focus.
    const list = status.approvals || [];
    waitingTable.update(list);
    if (list.length && waitingTable.table.parentNode !== waiting) {
      waiting.replaceChildren(el("h2", {}, "Waiting for approval"), waitingTable.table);
    } else if (!list.length && waiting.firstChild) {
      waiting.replaceChildren();
    }
  };

  const rowOf = ({ e, depth, ctx }) => {
    let row;
    if (ctx) {
      row = el("div", { class: "ctx" }, contextLine(e.payload.context));
    } else {
      const { text, extra } = describe(e);
      const child = e.type === "tool.requested" ? childOf(e.payload || {}) : "";
      row = el("div", { class: "step" + (e.id === selected ? " selected" : ""), dataset: { id: e.id }, onclick: () => show(e) },
        el("span", { class: "seq" }, e.seq),
        el("span", { class: typeClass(e.type) }, e.type),
        el("span", { class: "text" }, text, child ? [" → ", el("a", { href: "#/sessions/" + encodeURIComponent(child), onclick: (ev) => ev.stopPropagation() }, "child session " + child)] : null),
        el("span", { class: "extra" }, extra.join(" · ")),
        el("span", { class: "extra" }, e.actor));
    }
    // The indentation of its depth, set through the DOM (the policy refuses
    // inline style attributes, not the DOM's).
    if (depth) { row.classList.add("nested"); row.style.marginLeft = (depth * 1.4) + "em"; }
    return row;
  };

  // drawRows draws the rows in view: the sizer is as tall as all the rows, and
  // the rows box holds the ones in view, moved down to where they sit.
  const drawRows = () => {
    const n = layout.rows.length;
    sizer.style.height = (n * ROW_PX) + "px";
    const view = tree.clientHeight || window.innerHeight;
    const first = Math.max(0, Math.floor(tree.scrollTop / ROW_PX) - OVERSCAN);
    const last = Math.min(n, Math.ceil((tree.scrollTop + view) / ROW_PX) + OVERSCAN);
    const key = `${first}:${last}:${generation}:${selected}`;
    if (key === drawn) return;
    drawn = key;
    rowsBox.style.transform = `translateY(${first * ROW_PX}px)`;
    rowsBox.replaceChildren(...layout.rows.slice(first, last).map(rowOf));
  };
  let frame = 0;
  const drawSoon = () => {
    if (frame) return;
    frame = requestAnimationFrame(() => { frame = 0; drawRows(); });
  };
  signal.addEventListener("abort", () => cancelAnimationFrame(frame));

  // drawTree lays out the events not yet laid out and draws the rows in view.
  const drawTree = () => {
    if (!extend(layout, events)) {
      layout = layOut(events);
      texts = [];
    }
    generation++;
    drawRows();
  };

  const refreshStatus = async () => {
    Object.assign(status, await api(base));
    drawHead();
    // The stream stays open (a next task of the session shows live too); the label
    // says whether a task runs.
    if (!signal.aborted) liveLabel.textContent = status.status === "running" ? "● live" : "";
  };

  // selectSeq shows event seq of the page's address once it is read.
  const selectSeq = () => {
    if (!seq) return true;
    const e = events.find((x) => x.seq === seq);
    if (!e) return complete;
    show(e);
    reveal(e);
    return true;
  };

  drawHead();
  drawTree();
  let sought = selectSeq();
  const statusShown = statusRead.then((s) => {
    if (signal.aborted) return;
    Object.assign(status, s);
    drawHead();
  });
  // The other pages, each drawn as it comes: the page stays usable meanwhile.
  while (!complete) {
    const page = await eventsPage(id, events[events.length - 1].seq + 1);
    if (signal.aborted) return;
    for (const e of page) events.push(e);
    complete = page.length < EVENTS_PAGE;
    drawTree();
    document.getElementById("events-count").textContent = fmtInt(events.length) + (complete ? "" : "+ (reading…)");
    if (!sought) sought = selectSeq();
  }
  await statusShown;
  if (signal.aborted) return;
  if (events.length > EVENTS_PAGE) drawHead();
  tree.dataset.complete = "";
  if (status.status !== "running") return;

  // Live: the events after the last one read, as they are recorded.
  liveLabel.textContent = "● live";
  signal.addEventListener("abort", () => { liveLabel.textContent = ""; });
  let last = events.length ? events[events.length - 1].seq : 0;
  let pending = false;
  let liveKey = "";
  const onEvent = (type, e) => {
    if (!e || typeof e !== "object") return;
    if (type === "model.delta" || e.type === "model.delta") {
      // An increment of a model answer as it streams (live only, seq 0): shown
      // until the call's model.responded arrives with the whole answer.
      const d = e.payload || {};
      if (d.reset || d.key !== liveKey) { live.textContent = ""; liveKey = d.key; }
      let piece = typeof d.content === "string" ? d.content : "";
      if (typeof d.tool_name === "string" && d.tool_name) piece += `\n${d.tool_name} `;
      if (typeof d.arguments === "string") piece += d.arguments;
      // Marked piece by piece: an invisible character is one code unit, never split.
      if (piece) { live.hidden = false; live.textContent += visible(piece); }
      return;
    }
    // Anything else that is no event of the log is ignored.
    if (typeof e.seq !== "number" || e.seq < 1 || typeof e.type !== "string") return;
    if (e.seq <= last) return;
    last = e.seq;
    events.push(e);
    if (e.type === "model.responded" && (!liveKey || (e.payload && e.payload.key === liveKey))) { live.textContent = ""; live.hidden = true; liveKey = ""; }
    if (!pending) {
      pending = true;
      setTimeout(() => { pending = false; drawTree(); drawHead(); }, 50); // one redraw for a burst
    }
    if (e.type.startsWith("task.") || e.type.startsWith("approval.")) refreshStatus().then(() => clearError(refreshStatus), (err) => showError(err, refreshStatus));
  };
  // Reconnect (from the last seq) until the page changes.
  while (!signal.aborted) {
    try {
      await stream(id, last, onEvent, signal);
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof AuthNeeded) throw err;
    }
    if (!signal.aborted) await new Promise((r) => setTimeout(r, 2000));
  }
}

// --- approvals --------------------------------------------------------------

// callRef names a waiting call in its answer's URL: its key, unique in the
// session. Its call_id, the model's, may name another call too (models reuse IDs
// from reply to reply: the node refuses an answer by an ID answered the same way
// before), or be "." or "..", which the browser would take for a path's dot segment.
const callRef = (a) => a.key;

// approvalsTable is a table of calls waiting for approval, drawn by its
// update(list) as often as the list is read. A call that still waits keeps its
// row, the very element: what is typed in its reason box, the box's focus and
// selection, and the buttons of an answer on its way stay as they are while
// other calls come to wait or are answered elsewhere (drawn anew, the reason
// would go, and Approve send the call out with none). A call that no longer
// waits takes its row away, and what was typed in it; a new one gets a row of
// its own. after runs once an answer went through (it reads the list again).
function approvalsTable(after) {
  const tbody = el("tbody");
  const table = el("table", {},
    el("thead", {}, el("tr", {}, el("th", {}, "Session"), el("th", {}, "Tool"), el("th", {}, "Arguments"),
      el("th", {}, "Requested"), el("th", {}, "Expires"), el("th", {}, "Answer"))),
    tbody);
  // The rows by call: a key is unique in its session, and the approvals page
  // lists the calls of many.
  const rows = new Map();
  const update = (list) => {
    const want = list.map((a) => {
      const id = JSON.stringify([a.session_id, callRef(a)]);
      let tr = rows.get(id);
      if (!tr) {
        tr = approvalRow(a, after);
        rows.set(id, tr);
      }
      return [id, tr];
    });
    const ids = new Set(want.map(([id]) => id));
    for (const [id, tr] of rows) {
      // A refused answer's error is about its row's call: gone (answered
      // elsewhere, say), it is no longer the page's.
      if (!ids.has(id)) { tr.remove(); rows.delete(id); clearError(tr); }
    }
    // The list's order, moving only the rows out of place: a row moved leaves
    // the document for a moment, and its box loses the focus, given back below.
    const focused = document.activeElement;
    const held = focused instanceof HTMLInputElement && tbody.contains(focused)
      ? [focused.selectionStart, focused.selectionEnd, focused.selectionDirection] : null;
    let at = tbody.firstChild;
    for (const [, tr] of want) {
      if (at === tr) at = at.nextSibling;
      else tbody.insertBefore(tr, at);
    }
    if (held && focused.isConnected && document.activeElement !== focused) {
      focused.focus();
      focused.setSelectionRange(...held);
    }
  };
  return { table, update };
}

// approvalRow is the row of a, a call waiting for approval, with its reason
// box and its buttons. An answer refused shows its error, naming the call, until
// an answer of the call goes through or its row goes (approvalsTable): a call
// answered elsewhere (409) leaves the list, and its error with it.
function approvalRow(a, after) {
  const reason = el("input", { placeholder: "reason (optional)" });
  let tr = null;
  const answer = async (approve, btns) => {
    btns.forEach((b) => { b.disabled = true; });
    try {
      await api(`/v1/sessions/${encodeURIComponent(a.session_id)}/approvals/${encodeURIComponent(callRef(a))}`, {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ approve, reason: reason.value }) });
      clearError(tr);
      await after();
    } catch (err) {
      showError(err instanceof AuthNeeded ? err
        : new Error(`the call of ${a.tool} in session ${a.session_id}: ${err.message || err}`), tr);
      btns.forEach((b) => { b.disabled = false; });
    }
  };
  const yes = el("button", { class: "approve", type: "button" }, "Approve");
  const no = el("button", { class: "reject", type: "button" }, "Reject");
  yes.addEventListener("click", () => answer(true, [yes, no]));
  no.addEventListener("click", () => answer(false, [yes, no]));
  tr = el("tr", {},
    el("td", {}, sessionLink(a.session_id)),
    el("td", {}, a.tool),
    el("td", { class: "args" }, el("pre", {}, a.arguments)),
    el("td", {}, a.requested_at ? new Date(a.requested_at).toLocaleString() : ""),
    el("td", {}, a.expires_at ? new Date(a.expires_at).toLocaleString() : "—"),
    el("td", {}, reason, " ", yes, " ", no));
  return tr;
}

async function approvalsPage({ every }) {
  const box = el("div");
  const none = el("p", { class: "muted" }, "No tool call waits for approval.");
  render(el("h1", {}, "Waiting for approval"), box);
  const refresh = async () => {
    const list = await api("/v1/approvals");
    table.update(list);
    // The table stays in place while calls wait: put back, it would lose the focus.
    const shown = list.length ? table.table : none;
    if (shown.parentNode !== box) box.replaceChildren(shown);
  };
  const table = approvalsTable(refresh);
  await every(3000, refresh);
}

// --- charts -----------------------------------------------------------------

const chartRange = { since: "24h" };
const RANGES = { "1h": 3600e6, "24h": 86400e6, "168h": 7 * 86400e6, "720h": 30 * 86400e6 };
// CHART_BUCKETS is how many bars a chart has: the log sums the range's events into
// as many buckets of time (GET /v1/stats?buckets=), so the page reads those sums,
// not the events of the range's sessions.
const CHART_BUCKETS = 24;

async function chartsPage({ signal }) {
  const status = el("p", { class: "muted" }, "Reading the event log…");
  const charts = el("div", { class: "charts" });
  const tables = el("div");
  render(
    el("h1", {}, "Charts"),
    el("div", { class: "filters" }, el("label", {}, "Range ", select(chartRange.since,
      [["1h", "1 hour"], ["24h", "24 hours"], ["168h", "7 days"], ["720h", "30 days"]],
      (v) => { chartRange.since = v; route(); })), status),
    charts, tables);
  const span = RANGES[chartRange.since];
  const stats = await api(`/v1/stats?since=${encodeURIComponent(chartRange.since)}&buckets=${CHART_BUCKETS}`);
  if (signal.aborted) return;
  const series = stats.series || [];
  const tokens = series.map((b) => b.tokens), cost = series.map((b) => b.cost_usd), errors = series.map((b) => b.errors);
  const latAvg = series.map((b) => (b.tool_calls ? b.tool_latency_us / b.tool_calls / 1000 : 0));
  const latMax = series.map((b) => b.tool_latency_max_us / 1000);
  const labels = series.map((b) => new Date(b.start_us / 1000));
  const label = (d) => span <= 86400e6 ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) : d.toLocaleDateString([], { month: "short", day: "numeric" });
  const chart = (title, values, fmt, cls) => el("div", { class: "chart" }, el("h3", {}, title),
    barChart(values, labels.map(label), fmt, cls));
  charts.replaceChildren(
    chart("Tokens (prompt + completion)", tokens, (v) => fmtInt(Math.round(v))),
    chart("Cost (USD)", cost, (v) => "$" + v.toFixed(4)),
    chart("Tool latency, mean (ms)", latAvg, (v) => v.toFixed(1) + " ms"),
    chart("Tool latency, max (ms)", latMax, (v) => v.toFixed(1) + " ms"),
    chart("Errors (model, tool, failed tasks)", errors, (v) => String(v), "err"));
  const sum = (rows, f) => (rows || []).reduce((n, r) => n + f(r), 0);
  status.textContent = `${fmtInt(sum(stats.sessions, (r) => r.sessions))} sessions, ${fmtInt(sum(stats.models, (r) => r.calls))} model calls, ` +
    `${fmtInt(sum(series, (b) => b.tool_calls))} tool calls`;

  const table = (title, cols, rows) => [el("h2", {}, title), rows && rows.length
    ? el("table", {}, el("thead", {}, el("tr", {}, cols.map(([h, , num]) => el("th", { class: num ? "num" : "" }, h)))),
        el("tbody", {}, rows.map((r) => el("tr", {}, cols.map(([, f, num]) => el("td", { class: num ? "num" : "" }, f(r)))))))
    : el("p", { class: "muted" }, "None.")];
  tables.replaceChildren(...[
    el("h2", { class: "muted" }, "Figures of the range (as replay stats prints them)"),
    table("Models", [["Day", (r) => r.day], ["Agent", (r) => r.agent], ["Model", (r) => r.model], ["Calls", (r) => fmtInt(r.calls), 1],
      ["Prompt", (r) => fmtInt(r.prompt_tokens), 1], ["Completion", (r) => fmtInt(r.completion_tokens), 1],
      ["Cached", (r) => fmtInt(r.cached_tokens), 1], ["Cost USD", (r) => r.cost_usd.toFixed(6), 1]], stats.models),
    table("Tools", [["Tool", (r) => r.tool], ["Calls", (r) => fmtInt(r.calls), 1], ["Errors", (r) => fmtInt(r.errors), 1],
      ["Error rate", (r) => (100 * r.error_rate).toFixed(1) + "%", 1], ["P50", (r) => fmtDur(r.p50_us), 1], ["P95", (r) => fmtDur(r.p95_us), 1]], stats.tools),
    table("Sessions", [["Agent", (r) => r.agent], ["Sessions", (r) => fmtInt(r.sessions), 1], ["Completed", (r) => fmtInt(r.completed), 1],
      ["Failed", (r) => fmtInt(r.failed), 1], ["Running", (r) => fmtInt(r.running), 1], ["Avg steps", (r) => r.avg_steps.toFixed(1), 1],
      ["P50 duration", (r) => fmtDur(r.p50_duration_us), 1], ["P95 duration", (r) => fmtDur(r.p95_duration_us), 1]], stats.sessions),
    table("Memory", [["Tier", (r) => r.tier], ["Op", (r) => r.op], ["Count", (r) => fmtInt(r.count), 1]], stats.memory),
  ].flat());
}

showLogout();
route();
