// holdfast live view: a read-only page over the public API (Connect protocol,
// JSON, through fetch). It lists the keys held under a prefix with every
// lease on each (a mutex's holder, a semaphore's permit holders, a
// read-write lock's readers or writer, an election's leader with its term
// and value), streams acquire/release/expire/proclaim events from Watch and
// shows the backend's facts.
//
// Consistency: the page opens Watch first and takes a List snapshot only
// after the stream's SYNCED event, so no change between the two is missed.
// Events that arrive while a List is in flight are replayed on top of its
// result, and fencing tokens decide between a stale and a fresh view of a
// grant (keys.ts: an event is about one grant of a key, never the whole key).
// A List every few seconds refreshes what no event reports (waiters, extends).
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { durationMs, timestampMs } from "@bufbuild/protobuf/wkt";
import {
  EventType, Kind, LockService, Mode,
  type GetServerInfoResponse, type Grant, type HlcTimestamp, type LockState,
} from "./gen.js";
import { formatClock, formatDuration, formatTimeLeft } from "./format.js";
import { inUse, KeyTable, permitsOf, type Change, type KeyView } from "./keys.js";

const TOKEN_KEY = "holdfast.token";
const REFRESH_MS = 3000;
const MAX_EVENTS = 200;
const MAX_LOCKS = 5000;
const PAGE_SIZE = 1000;

// The API lives on the origin that served the page.
const baseUrl = window.location.origin;

let token = sessionStorage.getItem(TOKEN_KEY) ?? "";
const auth: Interceptor = (next) => (req) => {
  if (token !== "") req.header.set("Authorization", `Bearer ${token}`);
  return next(req);
};
const client: Client<typeof LockService> = createClient(
  LockService,
  createConnectTransport({ baseUrl, useBinaryFormat: false, interceptors: [auth] }),
);

function el<T extends HTMLElement>(id: string, type: { new (): T; prototype: T }): T {
  const e = document.getElementById(id);
  if (!(e instanceof type)) throw new Error(`live view: #${id} is missing from index.html, or is not a ${type.name}`);
  return e;
}

const ui = {
  status: el("status", HTMLElement),
  statusText: el("status-text", HTMLElement),
  banner: el("banner", HTMLElement),
  prefix: el("prefix", HTMLInputElement),
  token: el("token", HTMLInputElement),
  tokenForm: el("token-form", HTMLFormElement),
  tokenClear: el("token-clear", HTMLButtonElement),
  facts: el("facts", HTMLElement),
  locks: el("locks-body", HTMLTableSectionElement),
  lockCount: el("lock-count", HTMLElement),
  empty: el("locks-empty", HTMLElement),
  events: el("events", HTMLOListElement),
  eventsEmpty: el("events-empty", HTMLElement),
  eventsClear: el("events-clear", HTMLButtonElement),
};

// ---- clock ----------------------------------------------------------------

// serverAhead estimates how far the server's clock runs ahead of this
// browser's (from the wall time of the latest server stamp), so "time left"
// counts down against the server's view of expires_at.
let serverAhead = 0;

function noteStamp(stamp: HlcTimestamp | undefined): void {
  if (!stamp || stamp.wallTimeNs === 0n) return;
  serverAhead = Number(stamp.wallTimeNs / 1_000_000n) - Date.now();
}

function serverNow(): number {
  return Date.now() + serverAhead;
}

// ---- status ---------------------------------------------------------------

type Status = "connecting" | "live" | "reconnecting" | "unauthenticated";

function setStatus(s: Status, text: string): void {
  ui.status.dataset.state = s;
  ui.statusText.textContent = text;
  ui.empty.textContent = s === "live" ? "No lock is held under this prefix." : "Not connected.";
}

function showBanner(text: string): void {
  ui.banner.textContent = text;
  ui.banner.hidden = text === "";
}

function describe(err: unknown): string {
  const ce = ConnectError.from(err);
  return `${Code[ce.code]}: ${ce.rawMessage}`;
}

function isAuthError(err: unknown): boolean {
  const code = ConnectError.from(err).code;
  return code === Code.Unauthenticated || code === Code.PermissionDenied;
}

// ---- backend facts --------------------------------------------------------

function fact(label: string, value: string, title = ""): HTMLElement {
  const div = document.createElement("div");
  div.className = "fact";
  const dt = document.createElement("dt");
  dt.textContent = label;
  const dd = document.createElement("dd");
  dd.textContent = value;
  dd.dataset.fact = label;
  if (title) div.title = title;
  div.append(dt, dd);
  return div;
}

function yesNo(b: boolean): string {
  return b ? "yes" : "no";
}

function renderFacts(info: GetServerInfoResponse): void {
  const b = info.backend;
  const dur = (d: Parameters<typeof durationMs>[0] | undefined) => (d ? formatDuration(durationMs(d)) : "–");
  ui.facts.replaceChildren(
    fact("backend", b?.name ?? "–"),
    fact("backend version", b?.version || "–"),
    fact("server version", info.version || "–"),
    fact("shared", yesNo(b?.shared ?? false), "several servers see the same locks"),
    fact("durable", yesNo(b?.durable ?? false), "locks survive a backend restart"),
    fact("fair", yesNo(b?.fair ?? false), "FIFO across servers"),
    fact("granularity", dur(b?.ttlGranularity), "expiry is seen within TTL + this"),
    fact("TTL range", `${dur(b?.minTtl)} – ${dur(b?.maxTtl)}`),
  );
  ui.facts.dataset.loaded = "true";
}

async function loadFacts(signal: AbortSignal): Promise<void> {
  try {
    const info = await client.getServerInfo({}, { signal });
    noteStamp(info.serverStamp);
    renderFacts(info);
  } catch (err) {
    if (signal.aborted) return;
    // The banner explains; the full error is in the tooltip.
    ui.facts.replaceChildren(fact("backend", isAuthError(err) ? "needs a token" : "unavailable", describe(err)));
  }
}

// ---- locks ----------------------------------------------------------------

const table = new KeyTable();
let truncated = false;

const KIND_NAMES: Partial<Record<Kind, string>> = {
  [Kind.MUTEX]: "mutex",
  [Kind.SEMAPHORE]: "semaphore",
  [Kind.RWLOCK]: "rwlock",
  [Kind.ELECTION]: "election",
};

function kindName(kind: Kind): string {
  return KIND_NAMES[kind] ?? "mutex";
}

function plural(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

// usage is what a key's holders hold together, in the kind's own terms.
function usage(v: KeyView): string {
  switch (v.kind) {
    case Kind.SEMAPHORE:
      return `${inUse(v)} of ${v.limit} permits`;
    case Kind.RWLOCK:
      if (v.holders.some((g) => g.mode === Mode.EXCLUSIVE)) return "writer";
      return plural(v.holders.length, "reader", "readers");
    case Kind.ELECTION: {
      // A leader's term is its fencing token.
      const leader = v.holders.at(-1);
      return leader ? `term ${leader.fencingToken}` : "";
    }
    default:
      return "";
  }
}

// holds is what one grant holds of a key of this kind ("" for a mutex).
function holds(kind: Kind, g: Grant): string {
  switch (kind) {
    case Kind.SEMAPHORE:
      return plural(permitsOf(g), "permit", "permits");
    case Kind.RWLOCK:
      return g.mode === Mode.EXCLUSIVE ? "writer" : "reader";
    case Kind.ELECTION:
      return "leader";
    default:
      return "";
  }
}

const VALUE_SHOWN = 80;
const graphemes = new Intl.Segmenter(undefined, { granularity: "grapheme" });

// cut keeps the first n characters (graphemes, so that no character is
// split) of s, marking a cut with an ellipsis.
function cut(s: string, n: number): string {
  let out = "";
  let i = 0;
  for (const { segment } of graphemes.segment(s)) {
    if (i++ === n) return `${out}…`;
    out += segment;
  }
  return out;
}

// valueSpan shows a leader's value (up to 4096 bytes: cut, whole in the
// tooltip), quoted so that an empty or blank value is visible as such.
function valueSpan(value: string): HTMLSpanElement {
  const span = document.createElement("span");
  span.className = "value";
  span.dataset.value = value;
  span.textContent = `“${cut(value, VALUE_SHOWN)}”`;
  span.title = value;
  return span;
}

function cell(cls: string, text: string): HTMLTableCellElement {
  const td = document.createElement("td");
  td.className = cls;
  td.textContent = text;
  return td;
}

// A key is one row per grant (a leader's value on a row of its own below
// it); the key, its kind with what its holders hold together, and its
// waiters span them.
function keyRows(v: KeyView): HTMLTableRowElement[] {
  const election = v.kind === Kind.ELECTION;
  const span = v.holders.length * (election ? 2 : 1);
  return v.holders.flatMap((g, i) => {
    const tr = document.createElement("tr");
    tr.dataset.key = v.key;
    tr.dataset.token = g.fencingToken.toString();
    tr.dataset.kind = kindName(v.kind);
    if (i === 0) {
      const kind = cell("kind", "");
      const name = document.createElement("span");
      name.className = "kind-name";
      name.textContent = kindName(v.kind);
      kind.append(name);
      const u = usage(v);
      if (u !== "") {
        const em = document.createElement("span");
        em.className = "usage";
        em.textContent = u;
        kind.append(em);
      }
      const cells = [cell("key", v.key), kind];
      for (const c of cells) c.rowSpan = span;
      tr.append(...cells);
      tr.classList.add("first");
    }
    const left = cell("left", "");
    if (g.expiresAt) left.dataset.expires = String(timestampMs(g.expiresAt));
    tr.append(cell("holder", g.holder || "—"), cell("token num", g.fencingToken.toString()),
      cell("holds", holds(v.kind, g) || "—"), left);
    if (i === 0) {
      const w = cell("waiters num", String(v.waiters));
      w.rowSpan = span;
      tr.append(w);
    }
    if (!election) return [tr];
    // The value can be long (4096 bytes): it gets the grant's full width.
    const vr = document.createElement("tr");
    vr.className = "value-row";
    vr.dataset.key = v.key;
    vr.dataset.valueToken = g.fencingToken.toString();
    const td = cell("value-cell", "value ");
    td.colSpan = 4;
    td.append(valueSpan(g.value));
    vr.append(td);
    return [tr, vr];
  });
}

function renderLocks(): void {
  const sorted = [...table.keys.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  ui.locks.replaceChildren(...sorted.flatMap(keyRows));
  ui.lockCount.textContent = truncated ? `first ${sorted.length}` : String(sorted.length);
  ui.empty.hidden = sorted.length > 0;
  tick();
}

// tick counts every "time left" cell down against the server's clock.
function tick(): void {
  const now = serverNow();
  for (const td of ui.locks.querySelectorAll<HTMLTableCellElement>("td.left")) {
    const exp = td.dataset.expires;
    if (exp === undefined) {
      td.textContent = "—";
      continue;
    }
    const ms = Number(exp) - now;
    td.textContent = formatTimeLeft(ms);
    td.classList.toggle("soon", ms < 5000);
  }
}

// ---- events ---------------------------------------------------------------

const CHANGES: Partial<Record<EventType, Change>> = {
  [EventType.ACQUIRED]: "acquired",
  [EventType.RELEASED]: "released",
  [EventType.EXPIRED]: "expired",
  [EventType.PROCLAIMED]: "proclaimed",
};

function addEvent(name: Change, s: LockState): void {
  const li = document.createElement("li");
  li.dataset.type = name;
  li.dataset.key = s.key;
  const span = (cls: string, text: string) => {
    const e = document.createElement("span");
    e.className = cls;
    e.textContent = text;
    return e;
  };
  const g = s.holders.at(0);
  const meta = span("meta", "");
  meta.append(span("token", `#${s.fencingToken}`));
  if (s.holder !== "") meta.append(" · ", span("holder", s.holder));
  const share = g ? holds(s.kind, g) : "";
  if (share !== "") meta.append(" · ", span("holds", share));
  if (g && s.kind === Kind.ELECTION) meta.append(" · ", valueSpan(g.value));
  li.append(span("time", formatClock(new Date())), span(`badge ${name}`, name), span("key", s.key), meta);
  li.title = `${name} ${s.key} (${kindName(s.kind)}${share ? `, ${share}` : ""}), fencing token ${s.fencingToken}${s.holder ? `, holder ${s.holder}` : ""}`;
  ui.events.prepend(li);
  while (ui.events.children.length > MAX_EVENTS) ui.events.lastElementChild?.remove();
  ui.eventsEmpty.hidden = true;
}

// ---- sync loop ------------------------------------------------------------

async function listAll(prefix: string, signal: AbortSignal): Promise<{ states: LockState[]; more: boolean }> {
  const states: LockState[] = [];
  let pageToken = "";
  do {
    const res = await client.list({ prefix, pageSize: PAGE_SIZE, pageToken }, { signal });
    noteStamp(res.serverStamp);
    states.push(...res.locks);
    pageToken = res.nextPageToken;
  } while (pageToken !== "" && states.length < MAX_LOCKS);
  return { states, more: pageToken !== "" };
}

type Pending = { change: Change; state: LockState }[];

/** One watch-and-list session for a prefix; ends when signal aborts. */
async function follow(prefix: string, signal: AbortSignal): Promise<void> {
  // A function, not signal.aborted itself: the compiler would take a check
  // of the property as settled across the awaits of the loop.
  const stopped = (): boolean => signal.aborted;
  let backoff = 500;
  while (!stopped()) {
    // Events seen while a List is in flight, replayed over its result.
    let pending: Pending | null = null;
    const refresh = async () => {
      pending = [];
      try {
        const { states, more } = await listAll(prefix, signal);
        table.replace(states, pending);
        truncated = more;
        renderLocks();
      } finally {
        pending = null;
      }
    };
    let timer: ReturnType<typeof setInterval> | undefined;
    try {
      setStatus(backoff === 500 ? "connecting" : "reconnecting", "connecting…");
      const stream = client.watch({ target: { case: "prefix", value: prefix } }, { signal });
      for await (const ev of stream) {
        noteStamp(ev.serverStamp);
        if (ev.type === EventType.SYNCED) {
          await refresh();
          showBanner("");
          setStatus("live", "live");
          backoff = 500;
          // What no event reports (waiters, extends) comes from a List now
          // and then; a failed refresh is shown and retried by the next one.
          timer ??= setInterval(() => {
            if (pending) return;
            refresh().catch((err: unknown) => {
              if (!stopped()) showBanner(`Refreshing the list failed: ${describe(err)}`);
            });
          }, REFRESH_MS);
          continue;
        }
        const change = CHANGES[ev.type];
        if (!ev.state || !change) continue;
        const held = pending as Pending | null;
        if (held) held.push({ change, state: ev.state });
        table.apply(change, ev.state);
        addEvent(change, ev.state);
        renderLocks();
      }
      if (stopped()) return;
      showBanner("The server ended the event stream; reconnecting.");
    } catch (err) {
      if (stopped()) return;
      if (isAuthError(err)) {
        // Retrying cannot help; a new token or prefix starts a new session.
        if (ConnectError.from(err).code === Code.Unauthenticated) {
          setStatus("unauthenticated", "needs a token");
          showBanner(`${describe(err)}. Enter an API token above.`);
        } else {
          setStatus("unauthenticated", "not allowed");
          showBanner(`${describe(err)}. Choose a prefix this token may read, or another token.`);
        }
        return;
      }
      showBanner(`Lost the event stream (${describe(err)}); reconnecting.`);
    } finally {
      if (timer !== undefined) clearInterval(timer);
    }
    setStatus("reconnecting", `reconnecting in ${(backoff / 1000).toFixed(1)}s`);
    await sleep(backoff, signal);
    backoff = Math.min(backoff * 2, 10_000);
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    }, { once: true });
  });
}

// ---- wiring ---------------------------------------------------------------

let session: AbortController | null = null;

function start(): void {
  session?.abort();
  const ctl = new AbortController();
  session = ctl;
  table.clear();
  truncated = false;
  renderLocks();
  showBanner("");
  const prefix = ui.prefix.value;
  const url = new URL(window.location.href);
  if (prefix === "") url.searchParams.delete("prefix");
  else url.searchParams.set("prefix", prefix);
  history.replaceState(null, "", url);
  void loadFacts(ctl.signal);
  void follow(prefix, ctl.signal);
}

ui.prefix.value = new URLSearchParams(window.location.search).get("prefix") ?? "";
ui.token.value = token;

let debounce: ReturnType<typeof setTimeout> | undefined;
ui.prefix.addEventListener("input", () => {
  clearTimeout(debounce);
  debounce = setTimeout(start, 300);
});
ui.prefix.addEventListener("keydown", (e) => {
  if (e.key !== "Enter") return;
  clearTimeout(debounce);
  start();
});
ui.tokenForm.addEventListener("submit", (e) => {
  e.preventDefault();
  token = ui.token.value.trim();
  if (token === "") sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, token);
  start();
});
ui.tokenClear.addEventListener("click", () => {
  ui.token.value = "";
  ui.tokenForm.requestSubmit();
});
ui.eventsClear.addEventListener("click", () => {
  ui.events.replaceChildren();
  ui.eventsEmpty.hidden = false;
});

setInterval(tick, 200);
start();
