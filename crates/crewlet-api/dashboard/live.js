// The live projection the rooms read: first the snapshot, then the socket
// (/ws/stream?after=<cursor>, the token as a subprotocol), else a poll of
// the snapshot every 5 s.

import { api, auth, qs, AuthCancelled, content } from './api.js';
import { evType } from './ui.js';

const MAX_EVENTS = 500;
const FAILED_KIND = {
  task_failed: 'task_failed', 'turn.guard_breach': 'guard_breach', budget_exhausted: 'budget_exhausted',
  llm_unavailable: 'llm_unavailable', mcp_server_failed: 'mcp_server_failed',
};
/** Events that are never stored: their ids cannot resume a stream. */
const EPHEMERAL = new Set(['agent_turn_progress']);

const subs = new Map();

/**
 * Test hook, off unless a test defined `window.__crewletSeen = []` before
 * the page loaded: each event the store hands to the rooms is noted there.
 */
function deliver(ev) {
  const seen = globalThis.__crewletSeen;
  if (Array.isArray(seen)) seen.push({ id: ev.id, type: evType(ev), task_id: ev.task_id ?? null, payload: !!ev.payload });
  store.emit('event', ev);
}

export const store = {
  company: '',
  health: null,
  seats: new Map(),
  events: [], // newest first, deduped by id
  ids: new Set(),
  attention: [],
  budget: null,
  today: null,
  cursor: null, // newest stored event seen
  conn: 'connecting',
  clients: null,
  loaded: false,
  error: null,
  agentIds: new Map(), // agent id -> handle (from /agents)

  on(kind, fn) {
    if (!subs.has(kind)) subs.set(kind, new Set());
    subs.get(kind).add(fn);
    return () => subs.get(kind).delete(fn);
  },
  emit(kind, data) {
    for (const fn of subs.get(kind) || []) {
      try { fn(data); } catch (e) { console.error(e); }
    }
  },

  /** The seat handle an event is about. */
  handleOf(ev) {
    return ev?.tags?.agent_handle || ev?.handle || this.agentIds.get(ev?.agent_id) || null;
  },
  seatList() {
    return [...this.seats.values()];
  },
};

// uuid v7 strings sort by time.
const newer = (a, b) => !b || (a && a > b);

/** Newest event id that today's counts and the attention queue already reflect. */
let countedThrough = null;
/** A resuming socket's snapshot rows: merged once its replay is over. */
let pendingRows = null;

/**
 * A snapshot: from GET /stream/snapshot (a first paint, a poll) or the
 * socket's first frame. A socket opened with `after` replays, after its
 * snapshot, the events since then with their payloads, and the snapshot
 * already lists them without: its rows wait until `resumed` (`replayFollows`),
 * so the rooms get each event once, from the replay, with its payload.
 */
function applySnapshot(snap, { replayFollows = false } = {}) {
  store.company = snap.company || store.company;
  store.health = snap.health || null;
  content.set(!!snap.content_hidden);
  store.seats = new Map((snap.seats || []).map((seat) => [seat.handle, seat]));
  store.attention = snap.attention || [];
  store.budget = snap.budget || null;
  store.today = snap.today || null;
  if (newer(snap.cursor, countedThrough)) countedThrough = snap.cursor;
  pendingRows = replayFollows ? snap : null;
  const fresh = replayFollows ? [] : mergeRows(snap);
  const wasLoaded = store.loaded;
  store.loaded = true;
  store.error = null;
  store.emit('snapshot', snap);
  // A later snapshot (a poll, a reconnect) brings events the rooms have not
  // seen: hand them on as if they came live, oldest first.
  if (wasLoaded) for (const ev of fresh) deliver(ev);
}

/** Adds a snapshot's rows not yet held; answers them, oldest first. */
function mergeRows(snap) {
  if (newer(snap.cursor, store.cursor)) store.cursor = snap.cursor;
  const fresh = (snap.events || []).filter((ev) => !store.ids.has(ev.id));
  for (const ev of fresh) store.ids.add(ev.id);
  store.events = [...fresh, ...store.events].sort((a, b) => (a.id < b.id ? 1 : a.id > b.id ? -1 : 0)).slice(0, MAX_EVENTS);
  store.ids = new Set(store.events.map((ev) => ev.id));
  return fresh.sort((a, b) => (a.id < b.id ? -1 : 1));
}

/** The replay is over: what the snapshot listed and the replay did not bring (complete: false). */
function endReplay() {
  if (!pendingRows) return;
  const snap = pendingRows;
  pendingRows = null;
  for (const ev of mergeRows(snap)) deliver(ev);
}

function addEvent(ev) {
  const type = evType(ev);
  const ephemeral = EPHEMERAL.has(type);
  if (!ephemeral) {
    if (store.ids.has(ev.id)) return;
    store.ids.add(ev.id);
    // Counts move only for events the snapshot did not already reflect.
    const counted = newer(ev.id, countedThrough);
    if (counted) countedThrough = ev.id;
    if (newer(ev.id, store.cursor)) store.cursor = ev.id;
    // Newest first; a replayed event may be older than what is shown.
    let at = 0;
    while (at < store.events.length && store.events[at].id > ev.id) at++;
    store.events.splice(at, 0, ev);
    if (store.events.length > MAX_EVENTS) store.ids.delete(store.events.pop().id);
    if (counted) bumpToday(ev, type);
    if (FAILED_KIND[type] && counted) {
      store.attention.unshift({
        kind: FAILED_KIND[type] || type, handle: store.handleOf(ev), summary: ev.summary,
        at: ev.timestamp, event_id: ev.id, trace_id: ev.trace_id,
      });
      store.attention.length = Math.min(store.attention.length, 50);
      store.emit('attention', store.attention);
    }
  }
  deliver(ev);
}

function bumpToday(ev, type) {
  const t = store.today;
  if (!t || (t.since && ev.timestamp < t.since)) return;
  const p = ev.payload || {};
  if (type === 'agent_turn_completed') {
    t.turns = (t.turns || 0) + 1;
    t.input_tokens = (t.input_tokens || 0) + (Number(p.input_tokens) || 0);
    t.output_tokens = (t.output_tokens || 0) + (Number(p.output_tokens) || 0);
    t.total_tokens = (t.total_tokens || 0) + (Number(p.total_tokens) || (Number(p.input_tokens) || 0) + (Number(p.output_tokens) || 0));
  } else if (type === 'task_completed') t.tasks_completed = (t.tasks_completed || 0) + 1;
  else if (type === 'task_failed') t.tasks_failed = (t.tasks_failed || 0) + 1;
  else return;
  store.emit('today', t);
}

function setConn(state) {
  if (store.conn === state) return;
  store.conn = state;
  store.emit('conn', state);
}

// ---- transport -------------------------------------------------------------

let ws = null;
let backoff = 1000;
let retryTimer = null;
let pollTimer = null;
let watchdog = null;
let everOpened = false;

async function fetchSnapshot() {
  try {
    applySnapshot(await api('/stream/snapshot'));
    return true;
  } catch (err) {
    store.error = err;
    store.emit('error', err);
    if (err instanceof AuthCancelled) {
      // No token, no reads: stop asking until the reader offers one.
      stopPolling();
      clearTimeout(retryTimer);
      if (ws) { const old = ws; ws = null; old.close(1000, 'locked'); }
      setConn('locked');
    }
    return false;
  }
}

function startPolling() {
  if (pollTimer) return;
  setConn('polling');
  pollTimer = setInterval(fetchSnapshot, 5000);
}

function stopPolling() {
  clearInterval(pollTimer);
  pollTimer = null;
}

function socketUrl() {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${proto}//${location.host}/ws/stream${qs({ after: store.cursor })}`;
}

/**
 * The socket's subprotocols: `crewlet.v1`, which the server selects, and
 * the token (hex) when one is held, so it never travels in the URL (where
 * a proxy could log it) and never comes back in the answer.
 */
function socketProtocols() {
  const token = auth.token;
  if (!token) return undefined;
  const hex = Array.from(new TextEncoder().encode(token), (b) => b.toString(16).padStart(2, '0')).join('');
  return ['crewlet.v1', `crewlet.bearer.${hex}`];
}

function armWatchdog() {
  clearTimeout(watchdog);
  // Heartbeats come every 15 s; silence for 45 s means the link is dead.
  watchdog = setTimeout(() => ws && ws.close(4000, 'no heartbeat'), 45000);
}

function connect() {
  clearTimeout(retryTimer);
  if (ws) { const old = ws; ws = null; old.close(1000, 'reconnect'); }
  // socketUrl() asks for a replay after store.cursor when there is one.
  const resuming = !!store.cursor;
  let sock;
  try {
    sock = new WebSocket(socketUrl(), socketProtocols());
  } catch {
    scheduleReconnect();
    return;
  }
  ws = sock;
  pendingRows = null;
  let opened = false;
  sock.onopen = () => {
    opened = true;
    everOpened = true;
    backoff = 1000;
    stopPolling();
    setConn('live');
    armWatchdog();
  };
  sock.onmessage = (msg) => {
    armWatchdog();
    let frame;
    try { frame = JSON.parse(msg.data); } catch { return; }
    const { kind, data } = frame || {};
    if (kind === 'snapshot' && data) applySnapshot(data, { replayFollows: resuming });
    else if (kind === 'event' && data) addEvent(data);
    else if (kind === 'seat' && data?.handle) {
      store.seats.set(data.handle, data);
      store.emit('seat', data);
    } else if (kind === 'budget' && data) {
      // The ledger moved: the org budget, and caps that crossed 80%.
      store.budget = { org: data.org };
      const raised = data.attention || [];
      for (const a of [...raised].reverse()) store.attention.unshift(a);
      store.attention.length = Math.min(store.attention.length, 50);
      store.emit('today', store.today);
      if (raised.length) store.emit('attention', store.attention);
    } else if (kind === 'heartbeat') {
      store.clients = data?.clients ?? store.clients;
      store.emit('heartbeat', data);
    } else if (kind === 'resumed') {
      endReplay();
      store.emit('resumed', data);
      if (data && data.complete === false) store.emit('refetch', data);
    }
  };
  sock.onclose = (e) => {
    if (ws !== sock) return;
    ws = null;
    pendingRows = null;
    clearTimeout(watchdog);
    if (!opened && !everOpened) startPolling();
    else if (!pollTimer) setConn('reconnecting');
    // 4008: too slow; catch up at once from the last event seen.
    scheduleReconnect(e.code === 4008 ? 0 : undefined);
  };
  sock.onerror = () => { /* onclose follows */ };
}

function scheduleReconnect(delay) {
  clearTimeout(retryTimer);
  const wait = delay ?? backoff + Math.random() * 500;
  backoff = Math.min(backoff * 2, 30000);
  retryTimer = setTimeout(connect, wait);
}

/** First paint from the snapshot, then the socket. */
export async function start() {
  setConn('connecting');
  api('/agents').then((list) => {
    for (const a of list || []) if (a.id) store.agentIds.set(a.id, a.handle);
    store.emit('agents', list);
  }).catch(() => {});
  if (await fetchSnapshot() || store.conn !== 'locked') connect();
}

/** Reconnects now, e.g. after a token was given. */
export function reconnect() {
  backoff = 1000;
  connect();
}
