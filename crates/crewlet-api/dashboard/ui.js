// DOM building and formatting. Every string from the server reaches the page
// as a text node or an attribute value, never as markup.

const SVG_NS = 'http://www.w3.org/2000/svg';

function build(el, attrs, kids) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'value' && 'value' in el) el.value = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, kids);
  return el;
}

/** Appends children: nodes, strings (as text), numbers, arrays; skips null. */
export function append(el, kids) {
  for (const kid of kids) {
    if (kid === null || kid === undefined || kid === false) continue;
    if (Array.isArray(kid)) append(el, kid);
    else el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

/** h('a', {href: '#/x', class: 'y'}, 'text', child) */
export const h = (tag, attrs, ...kids) => build(document.createElement(tag), attrs, kids);
export const s = (tag, attrs, ...kids) => build(document.createElementNS(SVG_NS, tag), attrs, kids);

export function replace(el, ...kids) {
  el.replaceChildren();
  return append(el, kids);
}

// ---- formatting -----------------------------------------------------------

const nf = new Intl.NumberFormat('en-US');
export const num = (n) => (n === null || n === undefined || n === '' ? '–' : nf.format(Number(n)));

export function compact(n) {
  n = Number(n) || 0;
  if (n >= 1e9) return (n / 1e9).toFixed(1) + 'B';
  if (n >= 1e6) return (n / 1e6).toFixed(1) + 'M';
  if (n >= 1e4) return Math.round(n / 1e3) + 'k';
  if (n >= 1e3) return (n / 1e3).toFixed(1) + 'k';
  return String(n);
}

export function ms(d) {
  d = Number(d) || 0;
  if (d < 1000) return d + ' ms';
  if (d < 60000) return (d / 1000).toFixed(1) + ' s';
  return Math.floor(d / 60000) + ' m ' + Math.round((d % 60000) / 1000) + ' s';
}

export function ago(iso) {
  const t = Date.parse(iso);
  if (!iso || Number.isNaN(t)) return '–';
  let d = Math.round((Date.now() - t) / 1000);
  const future = d < 0;
  d = Math.abs(d);
  let out;
  if (d < 5) return future ? 'now' : 'just now';
  if (d < 60) out = d + 's';
  else if (d < 3600) out = Math.floor(d / 60) + 'm';
  else if (d < 86400) out = Math.floor(d / 3600) + 'h';
  else out = Math.floor(d / 86400) + 'd';
  return future ? 'in ' + out : out + ' ago';
}

/** A <time> with a relative text and the exact time on hover. */
export function when(iso, attrs = {}) {
  if (!iso) return h('span', { class: 'muted' }, '–');
  return h('time', { datetime: iso, title: iso, class: 'when', ...attrs }, ago(iso));
}

export const clock = (iso) => {
  const t = new Date(iso);
  return Number.isNaN(t.getTime()) ? '' : t.toISOString().slice(11, 19);
};

export const short = (id, n = 8) => (id ? String(id).slice(0, n) : '');
export const evType = (ev) => ev.type ?? ev.event_type ?? '';
const FAILED = new Set(['task_failed', 'llm_unavailable', 'budget_exhausted', 'turn.guard_breach', 'mcp_server_failed']);
/** The snapshot and socket say `failed`; /events rows do not, so it is derived the same way. */
export const isFailed = (ev) => ev.failed ?? (FAILED.has(evType(ev)) || (evType(ev) === 'agent_phase_completed' && ev.payload?.outcome === 'failed'));

// ---- small components ------------------------------------------------------

export const STATES = ['idle', 'working', 'awaiting_sandbox', 'failed', 'afk', 'offline'];
const STATE_TEXT = { awaiting_sandbox: 'coding in sandbox' };

export function stateBadge(state, phase) {
  const st = STATES.includes(state) ? state : 'offline';
  return h('span', { class: `badge st-${st}`, 'data-badge': st },
    h('span', { class: 'dot', 'aria-hidden': 'true' }), st === 'working' && phase ? `working · ${phase}` : STATE_TEXT[st] || st);
}

// Widths go through the CSSOM, not a style attribute: a strict
// Content-Security-Policy (style-src 'self') allows that.
function fill(pct) {
  const el = h('span', {});
  el.style.width = `${pct.toFixed(1)}%`;
  return el;
}

export function bar(used, max, label) {
  used = Number(used) || 0;
  max = Number(max) || 0;
  const pct = max > 0 ? Math.min(100, (used / max) * 100) : 0;
  const level = pct >= 100 ? 'over' : pct >= 80 ? 'near' : 'ok';
  return h('div', { class: 'budget' },
    h('div', { class: 'budget-text' }, h('span', {}, label || 'Budget'),
      h('span', { class: 'num' }, max > 0 ? `${num(used)} / ${num(max)} (${pct.toFixed(0)}%)` : `${num(used)} used · no cap`)),
    max > 0 ? h('div', {
      class: `meter ${level}`, role: 'meter', 'aria-valuemin': 0, 'aria-valuemax': max, 'aria-valuenow': Math.min(used, max),
      'aria-label': label || 'Budget',
    }, fill(pct)) : null);
}

export function json(value) {
  return h('pre', { class: 'json', tabindex: '0' }, JSON.stringify(value ?? null, null, 2));
}

export function errorBox(err, extra) {
  const status = err && err.status ? `${err.status} ` : '';
  const reason = err?.body?.reason || err?.body?.error || err?.message || String(err);
  return h('div', { class: 'error', role: 'alert' }, h('strong', {}, `${status}${err?.body?.error || 'Error'}`), ': ', reason, extra || null);
}

export const empty = (text) => h('p', { class: 'empty' }, text);

export function table(head, rows, attrs = {}) {
  return h('div', { class: 'table-wrap' }, h('table', attrs,
    h('thead', {}, h('tr', {}, head.map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, rows)));
}

export function dl(pairs, attrs = {}) {
  return h('dl', { class: 'kv', ...attrs }, pairs.filter(Boolean).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '–')]));
}

export function section(title, ...kids) {
  const id = 'sec-' + title.toLowerCase().replace(/[^a-z0-9]+/g, '-');
  return h('section', { class: 'panel', 'aria-labelledby': id }, h('h2', { id }, title), ...kids);
}

export const link = (href, text, attrs = {}) => h('a', { href, ...attrs }, text);
export const agentLink = (handle) => (handle ? link(`#/agents/${encodeURIComponent(handle)}`, handle, { class: 'handle' }) : null);
export const traceLink = (id, text) => (id ? link(`#/traces/${encodeURIComponent(id)}`, text || short(id, 10), { class: 'mono' }) : null);

/** A room's root: the landmark every test looks for. */
export function room(name, title, ...kids) {
  return h('section', { class: 'room', 'data-room': name, 'aria-labelledby': 'room-title', 'aria-busy': 'true' },
    h('h1', { id: 'room-title', tabindex: '-1' }, title), ...kids);
}

export function loaded(root) {
  root.setAttribute('aria-busy', 'false');
  root.dataset.loaded = 'true';
}

/** Random UUID also outside secure contexts (plain http on a LAN host). */
export function uuid() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = [...b].map((v) => v.toString(16).padStart(2, '0')).join('');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

/** Calls fn at most once per `wait` ms (trailing call kept). */
export function throttle(fn, wait) {
  let timer = null;
  let pending = false;
  return function run() {
    if (timer) { pending = true; return; }
    fn();
    timer = setTimeout(() => { timer = null; if (pending) { pending = false; run(); } }, wait);
  };
}

/** One event as a feed line (mission control, the agent page, a task's trace). */
export function eventItem(ev, handle) {
  const type = evType(ev);
  const bad = isFailed(ev);
  return h('li', { class: bad ? 'ev failed' : 'ev', 'data-event': ev.id, 'data-type': type },
    when(ev.timestamp, { class: 'when ev-time' }),
    h('a', { href: `#/events/${encodeURIComponent(ev.id)}`, class: 'ev-type' }, type),
    bad ? h('span', { class: 'tag bad' }, 'failed') : null,
    h('span', { class: 'ev-sum' }, ev.summary || ''),
    handle ? agentLink(handle) : ev.agent_role ? h('span', { class: 'muted' }, ev.agent_role) : null);
}

/** One event as a table row (the events room). */
export function eventRow(ev, handle) {
  const type = evType(ev);
  const bad = isFailed(ev);
  return h('tr', { class: bad ? 'failed' : null, 'data-event': ev.id },
    h('td', {}, when(ev.timestamp)),
    h('td', {}, h('a', { href: `#/events/${encodeURIComponent(ev.id)}` }, type), bad ? h('span', { class: 'tag bad' }, 'failed') : null),
    h('td', {}, ev.category || ''),
    h('td', { class: 'wrap' }, ev.summary || ''),
    h('td', {}, handle ? agentLink(handle) : ev.agent_role || ''),
    h('td', {}, traceLink(ev.trace_id)));
}

/**
 * Adds to a feed (newest first) the events of `events` it does not show yet,
 * each in its place, keeping at most `max`: additions only, so a live region
 * announces just what is new.
 */
export function syncFeed(list, events, item, max) {
  const shown = new Set([...list.children].map((li) => li.dataset.event));
  const fresh = events.slice(0, max).filter((e) => !shown.has(e.id));
  if (fresh.length) list.querySelector(':scope > .empty')?.remove();
  for (const ev of fresh) {
    const before = [...list.children].find((li) => li.dataset.event && li.dataset.event < ev.id);
    list.insertBefore(item(ev), before || null);
  }
  while (list.children.length > max) list.lastChild.remove();
}
