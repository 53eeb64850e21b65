// The shell: header, nav, hash router. Each room is a function
// (ctx) -> root element; ctx.signal aborts and ctx.on unsubscribes when the
// reader leaves the room.

import { auth, askToken, content, localTokenPath } from './api.js';
import { store, start, reconnect } from './live.js';
import { h, room, replace, ago as agoText } from './ui.js';
import { mission } from './mission.js';
import { agents, agent } from './agents.js';
import { traces, trace } from './traces.js';
import { tokens } from './tokens.js';
import { events, eventDetail } from './events.js';
import { schedules, tools, budgets } from './ops.js';
import { config } from './config.js';

const ROOMS = {
  mission: () => mission,
  agents: (p) => (p[0] ? agent : agents),
  traces: (p) => (p[0] ? trace : traces),
  tokens: () => tokens,
  events: (p) => (p[0] ? eventDetail : events),
  schedules: () => schedules,
  tools: () => tools,
  budgets: () => budgets,
  config: () => config,
};

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const menuBtn = document.getElementById('menu-btn');
let current = null;

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const q = raw.indexOf('?');
  const path = q < 0 ? raw : raw.slice(0, q);
  const parts = path.split('/').filter(Boolean).map((p) => {
    try { return decodeURIComponent(p); } catch { return p; }
  });
  return { name: parts[0] || 'mission', params: parts.slice(1), query: new URLSearchParams(q < 0 ? '' : raw.slice(q + 1)) };
}

/** Moves to a hash; `replace` keeps Back from landing on the old one. */
export function go(hash, { replace: rep = false, force = false } = {}) {
  const same = location.hash === hash;
  if (same && !force) return;
  if (rep || same) { history.replaceState(history.state, '', hash); mount(false); } else location.hash = hash;
}

function mount(focus) {
  if (current) current.abort.abort();
  const route = parseHash();
  const make = ROOMS[route.name];
  const abort = new AbortController();
  const offs = [];
  abort.signal.addEventListener('abort', () => offs.forEach((off) => off()));
  const ctx = {
    ...route, signal: abort.signal, go,
    on: (kind, fn) => offs.push(store.on(kind, fn)),
    alive: () => !abort.signal.aborted,
  };
  current = { abort, route, hash: location.hash };
  let root;
  try {
    root = make ? make(route.params)(ctx) : notFound(route);
  } catch (err) {
    console.error(err);
    root = room('error', 'Something broke', h('p', {}, String(err?.message || err)));
  }
  replace(main, root);
  const title = root.querySelector('h1')?.textContent || 'Crewlet';
  document.title = `${title} · Crewlet`;
  for (const a of nav.querySelectorAll('a[data-nav]')) {
    if (a.dataset.nav === route.name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (focus) {
    window.scrollTo(0, 0);
    root.querySelector('h1')?.focus({ preventScroll: true });
  }
}

function notFound(route) {
  const r = room('notfound', 'Not found', h('p', {}, `No room called “${route.name}”. `, h('a', { href: '#/mission' }, 'Go to mission control')));
  r.dataset.loaded = 'true';
  r.setAttribute('aria-busy', 'false');
  return r;
}

// ---- header -----------------------------------------------------------------

const CONN_TEXT = {
  connecting: 'Connecting…', live: 'Live', reconnecting: 'Reconnecting…', polling: 'Polling every 5 s', locked: 'Needs a token',
};

function paintConn() {
  const el = document.getElementById('conn');
  el.dataset.conn = store.conn;
  el.textContent = CONN_TEXT[store.conn] || store.conn;
  el.title = store.clients ? `${store.clients} dashboard client(s) connected` : '';
  document.getElementById('unlock').hidden = store.conn !== 'locked';
}

function paintToken() {
  document.getElementById('forget-token').hidden = !auth.token;
}

/** The notice that says what the server hid, and how to see it. */
function paintContent() {
  document.getElementById('content-hidden').hidden = !content.hidden;
  const hint = document.getElementById('local-token-hint');
  const path = localTokenPath();
  hint.replaceChildren(...(path ? [' Running locally without configured tokens? The API wrote one to ', h('code', {}, path), '.'] : []));
}

function paintCompany() {
  const el = document.getElementById('company');
  el.textContent = store.company || '';
  const v = store.health?.version;
  el.title = v ? `crewlet ${v}` : '';
}

function paintAttention() {
  const n = store.attention.length;
  const el = document.getElementById('attention-count');
  el.hidden = n === 0;
  el.textContent = n ? String(n) : '';
  el.setAttribute('aria-label', `${n} need attention`);
}

function setMenu(open) {
  nav.dataset.open = open ? 'true' : 'false';
  menuBtn.setAttribute('aria-expanded', String(open));
}

function boot() {
  document.getElementById('skip').addEventListener('click', (e) => {
    e.preventDefault();
    main.focus();
  });
  menuBtn.addEventListener('click', () => setMenu(nav.dataset.open !== 'true'));
  nav.addEventListener('click', (e) => { if (e.target.closest('a')) setMenu(false); });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && nav.dataset.open === 'true') { setMenu(false); menuBtn.focus(); }
  });
  document.getElementById('forget-token').addEventListener('click', () => auth.forget());
  document.getElementById('unlock').addEventListener('click', () => {
    askToken('Reads on this server need a token.').then(() => { start(); mount(false); }).catch(() => {});
  });
  document.getElementById('show-content').addEventListener('click', () => {
    // Asked to see content: once the token is given, read the room again.
    askToken('Prompts, responses and memory need a token with read:content (operate and admin include it).')
      .then(() => mount(false)).catch(() => {});
  });
  auth.onChange(paintToken);
  content.onChange(paintContent);
  store.on('conn', paintConn);
  store.on('heartbeat', paintConn);
  store.on('snapshot', () => { paintCompany(); paintAttention(); });
  store.on('attention', paintAttention);
  store.on('refetch', () => mount(false));
  paintConn();
  paintToken();
  paintContent();
  window.addEventListener('hashchange', () => {
    // Two quick moves queue two hashchange events, and both find the last
    // hash: the room already mounted for it is kept (mounting it again would
    // abort its reads half-way and read everything twice).
    if (location.hash === '#main' || location.hash === current?.hash) return;
    mount(true);
  });
  if (!location.hash || location.hash === '#' || location.hash === '#/') history.replaceState(null, '', '#/mission');
  mount(false);
  let heldToken = auth.token;
  auth.onChange(() => {
    // A new token (or none): the socket reads again with it, so the live
    // state shows the content the token may see. The room is read again
    // by whoever asked for the token (a write in flight keeps its room).
    if (auth.token === heldToken) return;
    heldToken = auth.token;
    reconnect();
  });
  start();
  // Relative times age: refresh them every 30 s.
  setInterval(() => {
    for (const t of document.querySelectorAll('time.when[datetime]')) t.textContent = agoText(t.getAttribute('datetime'));
  }, 30000);
}

boot();
