// Traces: the recent ones, grouped from recent events, and one trace as a
// tree of spans.

import { api, qs, notShown } from './api.js';
import { store } from './live.js';
import {
  h, room, replace, loaded, num, ms, when, section, empty, table, agentLink, errorBox, evType, short, throttle, clock, isFailed,
} from './ui.js';

const QUIET = 'agent_turn_progress';

// ---- #/traces ----------------------------------------------------------------

function groups(events) {
  const by = new Map();
  for (const ev of events) {
    if (!ev.trace_id || evType(ev) === QUIET) continue;
    if (!by.has(ev.trace_id)) by.set(ev.trace_id, new Map());
    by.get(ev.trace_id).set(ev.id, ev);
  }
  return [...by.entries()].map(([id, m]) => {
    const list = [...m.values()].sort((a, b) => (a.id < b.id ? -1 : 1));
    const seats = [...new Set(list.map((e) => store.handleOf(e)).filter(Boolean))];
    return { id, list, root: list[0], last: list[list.length - 1], seats, failed: list.filter(isFailed).length };
  }).sort((a, b) => (a.last.id < b.last.id ? 1 : -1));
}

export function traces(ctx) {
  const body = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const root = room('traces', 'Traces', h('p', { class: 'muted' }, 'Recent traces, from the latest events. A trace is everything one trigger caused.'), body);
  let fetched = [];
  const paint = () => {
    const gs = groups([...fetched, ...store.events]).slice(0, 100);
    replace(body, gs.length ? table(['Started', 'Root', 'Seats', 'Events', 'Lasted', 'Trace'], gs.map((g) => h('tr', { 'data-trace': g.id, class: g.failed ? 'failed' : null },
      h('td', {}, when(g.root.timestamp)),
      h('td', { class: 'wrap' }, h('a', { href: `#/traces/${encodeURIComponent(g.id)}` }, g.root.summary || evType(g.root)),
        h('div', { class: 'muted small' }, evType(g.root)), g.failed ? h('span', { class: 'tag bad' }, `${g.failed} failed`) : null),
      h('td', {}, g.seats.map((s, i) => [i ? ', ' : '', agentLink(s)])),
      h('td', { class: 'num' }, g.list.length),
      h('td', { class: 'num' }, ms(Date.parse(g.last.timestamp) - Date.parse(g.root.timestamp))),
      h('td', {}, h('a', { href: `#/traces/${encodeURIComponent(g.id)}`, class: 'mono' }, short(g.id, 10))))))
      : empty('No traced events yet.'));
  };
  api(`/events${qs({ limit: 300 })}`, { signal: ctx.signal }).then((page) => { fetched = page?.events || []; })
    .catch((err) => { if (ctx.alive()) body.before(errorBox(err)); })
    .finally(() => { if (ctx.alive()) { paint(); loaded(root); } });
  const soon = throttle(paint, 1000);
  ctx.on('event', (ev) => { if (ev.trace_id && evType(ev) !== QUIET) soon(); });
  ctx.on('snapshot', soon);
  return root;
}

// ---- #/traces/{id} ----------------------------------------------------------

/**
 * Spans from events: events sharing a span_id are one node, nested by
 * parent_span_id. A span whose parent recorded no event (the engine's inbox
 * and turn spans emit none) goes under the trace's first root span, marked
 * `via`, so a task and the turn it started read as one tree.
 */
export function spanTree(events) {
  const spans = new Map();
  const loose = [];
  for (const ev of events) {
    if (!ev.span_id) { loose.push(ev); continue; }
    let sp = spans.get(ev.span_id);
    if (!sp) spans.set(ev.span_id, (sp = { id: ev.span_id, parent: null, events: [], children: [] }));
    sp.events.push(ev);
    if (!sp.parent && ev.parent_span_id && ev.parent_span_id !== ev.span_id) sp.parent = ev.parent_span_id;
  }
  const roots = [];
  const first = (sp) => sp.events[0].id;
  // The anchor has no parent at all, so nothing hung under it makes a cycle.
  const anchor = [...spans.values()].filter((sp) => !sp.parent).sort((a, b) => (first(a) < first(b) ? -1 : 1))[0];
  for (const sp of spans.values()) {
    const parent = sp.parent && spans.get(sp.parent);
    if (parent && !isAncestor(sp, parent, spans)) parent.children.push(sp);
    else if (sp.parent && !parent && anchor && anchor !== sp) {
      sp.via = sp.parent;
      anchor.children.push(sp);
    } else roots.push(sp);
  }
  for (const sp of spans.values()) sp.children.sort((a, b) => (first(a) < first(b) ? -1 : 1));
  roots.sort((a, b) => (first(a) < first(b) ? -1 : 1));
  return { roots, loose };
}

function isAncestor(sp, candidate, spans) {
  // Guards against a cycle in parent_span_id.
  let cur = candidate;
  for (let i = 0; cur && i < 1000; i++) {
    if (cur === sp) return true;
    cur = cur.parent && spans.get(cur.parent);
  }
  return false;
}

function detailOf(ev, open, toggle) {
  const p = ev.payload || {};
  const type = evType(ev);
  const bits = [];
  if (type === 'notification_skipped') bits.push(h('span', { class: 'tag warn', 'data-testid': 'skip-reason' }, `skipped: ${p.reason || 'no reason given'}`));
  if (type === 'task_failed' || type === 'turn.guard_breach') bits.push(h('span', { class: 'tag bad' }, `${p.reason || p.kind || ''}${p.detail ? ': ' + p.detail : ''}`));
  if (type === 'agent_turn_completed') bits.push(h('span', { class: 'muted small' }, `${p.decision || ''} · ${num(p.total_tokens)} tokens · ${ms(p.duration_ms)}`));
  if (type === 'agent_phase_completed') {
    bits.push(h('span', { class: 'muted small' }, `${p.phase || ''} #${p.iteration ?? '?'} · ${p.model || ''} · ${num(p.input_tokens)} in / ${num(p.output_tokens)} out`));
    const panelId = `inspect-${ev.id}`;
    bits.push(h('button', {
      type: 'button', class: 'small ghost', 'aria-expanded': String(open), 'aria-controls': panelId, 'data-testid': 'inspect',
      onclick: () => toggle(ev.id),
    }, open ? 'Hide' : 'Inspect'));
    if (open) {
      bits.push(h('div', { class: 'inspect', id: panelId, 'data-testid': 'inspect-panel' },
        h('h4', {}, 'Prompt'), h('pre', { class: 'text', tabindex: '0' }, p.prompt ?? notShown()),
        h('h4', {}, 'Response'), h('pre', { class: 'text', tabindex: '0' }, p.response ?? notShown()),
        p.tool_executions?.length ? h('p', { class: 'small' }, 'Tools: ', p.tool_executions.map((t) => `${t.name} (${t.ok ? 'ok' : 'failed'}, ${ms(t.duration_ms)})`).join(', ')) : null));
    }
  }
  return bits;
}

export function trace(ctx) {
  const id = ctx.params[0];
  const headBox = h('div', {});
  const treeBox = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const root = room('trace', `Trace ${short(id, 12)}`, headBox, section('Spans', treeBox));
  root.dataset.trace = id;
  const byId = new Map();
  const open = new Set();
  let t0 = 0;

  const toggle = (evId) => {
    if (open.has(evId)) open.delete(evId); else open.add(evId);
    paint();
    treeBox.querySelector(`[data-event="${CSS.escape(evId)}"] [data-testid="inspect"]`)?.focus();
  };

  const row = (ev) => {
    const handle = store.handleOf(ev);
    const off = Date.parse(ev.timestamp) - t0;
    const bad = isFailed(ev);
    return h('div', { class: `trow ${bad ? 'failed' : ''}`, 'data-event': ev.id, 'data-type': evType(ev) },
      h('span', { class: 'mono small muted', title: ev.timestamp }, `+${(off / 1000).toFixed(2)}s`),
      h('a', { href: `#/events/${encodeURIComponent(ev.id)}`, class: 'ev-type' }, evType(ev)),
      bad ? h('span', { class: 'tag bad' }, 'failed') : null,
      h('span', { class: 'ev-sum' }, ev.summary || ''),
      handle ? agentLink(handle) : ev.agent_role ? h('span', { class: 'muted' }, ev.agent_role) : null,
      detailOf(ev, open.has(ev.id), toggle));
  };
  const spanEl = (sp, depth) => h('li', { class: 'span', 'data-span': sp.id },
    h('div', { class: 'span-label mono small muted' }, `span ${sp.id}`,
      sp.via ? h('span', { title: 'its parent span recorded no event' }, ` · via span ${sp.via}`) : null),
    sp.events.map(row),
    sp.children.length && depth < 64 ? h('ol', { class: 'tree' }, sp.children.map((c) => spanEl(c, depth + 1))) : null);

  function paint() {
    const list = [...byId.values()].sort((a, b) => (a.id < b.id ? -1 : 1));
    if (!list.length) { replace(treeBox, empty('No stored events in this trace (yet).')); replace(headBox); return; }
    const first = list[0];
    const last = list[list.length - 1];
    t0 = Date.parse(first.timestamp);
    const failed = list.filter(isFailed).length;
    const handles = [...new Set(list.map((e) => store.handleOf(e)).filter(Boolean))];
    replace(headBox, h('div', { class: 'panel trace-head', 'data-testid': 'trace-root' },
      h('p', { class: 'big' }, first.summary || evType(first)),
      h('p', {}, h('a', { href: `#/events/${encodeURIComponent(first.id)}` }, evType(first)), ` from ${first.source || '?'} at ${clock(first.timestamp)} UTC (`, when(first.timestamp), ')'),
      h('p', { class: 'muted' }, `${list.length} events · lasted ${ms(Date.parse(last.timestamp) - t0)}`,
        handles.length ? [' · seats: ', handles.map((s, i) => [i ? ', ' : '', agentLink(s)])] : null,
        failed ? h('span', { class: 'tag bad' }, `${failed} failed`) : null,
        ' · ', h('a', { href: `#/events${qs({ trace: id })}` }, 'as a list'))));
    const { roots, loose } = spanTree(list);
    replace(treeBox, h('ol', { class: 'tree tree-top' }, roots.map((sp) => spanEl(sp, 0))),
      loose.length ? h('div', { class: 'loose' }, h('h3', {}, 'Without a span'), loose.map(row)) : null);
  }

  api(`/events/trace/${encodeURIComponent(id)}`, { signal: ctx.signal }).then((r) => {
    for (const ev of r?.events || []) byId.set(ev.id, ev);
    paint();
  }).catch((err) => { if (ctx.alive()) replace(treeBox, errorBox(err)); })
    .finally(() => { if (ctx.alive()) loaded(root); });
  const soon = throttle(paint, 300);
  ctx.on('event', (ev) => {
    if (ev.trace_id !== id || evType(ev) === QUIET || byId.has(ev.id)) return;
    byId.set(ev.id, ev);
    soon();
  });
  return root;
}
