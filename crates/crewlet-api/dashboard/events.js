// Events: the stored log with filters and keyset paging, and one event.

import { api, qs } from './api.js';
import { store } from './live.js';
import { h, room, replace, loaded, when, empty, table, dl, json, agentLink, traceLink, errorBox, evType, eventRow } from './ui.js';

const CATEGORIES = ['lifecycle', 'task', 'system', 'communication', 'decision', 'knowledge', 'notification', 'learning', 'webhook'];
const TYPES = [
  'task_created', 'task_started', 'task_completed', 'task_failed', 'task_delegated', 'agent_turn_completed',
  'agent_phase_started', 'agent_phase_completed', 'budget_exhausted', 'turn.guard_breach', 'llm_unavailable',
  'provider_fallback', 'mcp_server_failed', 'config_revision_activated', 'message_sent', 'external_notification',
  'notification_skipped', 'raw_webhook', 'schedule_fired', 'diary_written', 'episode_recorded', 'skill_synthesized',
  'agent_spawned', 'agent_state_changed',
];
const FIELDS = ['type', 'category', 'agent', 'task', 'trace'];
const UUIDISH = /^[0-9a-f]{8}-[0-9a-f]{4}-/i;

async function agentIdOf(agent, signal) {
  if (!agent || UUIDISH.test(agent)) return agent;
  for (const [id, handle] of store.agentIds) if (handle === agent) return id;
  const a = await api(`/agents/${encodeURIComponent(agent)}`, { signal });
  return a?.id || agent;
}

export function events(ctx) {
  const f = Object.fromEntries(FIELDS.map((k) => [k, ctx.query.get(k) || '']));
  const input = (name, label, attrs = {}) => h('div', { class: 'field' }, h('label', { for: `f-${name}` }, label),
    h('input', { id: `f-${name}`, name, value: f[name], autocomplete: 'off', ...attrs }));
  const seatOptions = () => {
    const handles = store.seatList().filter((s) => s.kind !== 'human').map((s) => s.handle);
    if (f.agent && !handles.includes(f.agent)) handles.push(f.agent);
    return [h('option', { value: '' }, 'any'), handles.map((a) => h('option', { value: a, selected: a === f.agent }, a))];
  };
  const agentSelect = h('select', { id: 'f-agent', name: 'agent' }, seatOptions());
  const form = h('form', { class: 'filters', 'data-testid': 'event-filters', role: 'search' },
    input('type', 'Type', { list: 'event-types', placeholder: 'any' }),
    h('datalist', { id: 'event-types' }, TYPES.map((t) => h('option', { value: t }))),
    h('div', { class: 'field' }, h('label', { for: 'f-category' }, 'Category'),
      h('select', { id: 'f-category', name: 'category' }, h('option', { value: '' }, 'any'),
        CATEGORIES.map((c) => h('option', { value: c, selected: c === f.category }, c)))),
    h('div', { class: 'field' }, h('label', { for: 'f-agent' }, 'Agent'),
      agentSelect),
    input('task', 'Task id', { placeholder: 'any' }),
    input('trace', 'Trace id', { placeholder: 'any', pattern: '[0-9a-f]{32}', title: '32 lower-case hex digits' }),
    h('div', { class: 'field buttons' }, h('button', { type: 'submit' }, 'Apply'),
      h('a', { href: '#/events', class: 'button ghost' }, 'Clear')));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const data = Object.fromEntries(new FormData(form));
    ctx.go(`#/events${qs(Object.fromEntries(FIELDS.map((k) => [k, (data[k] || '').trim()])))}`);
  });

  const tbody = h('tbody', {});
  const status = h('p', { class: 'muted small', 'aria-live': 'polite' });
  const older = h('button', { type: 'button', class: 'ghost', 'data-testid': 'older', hidden: true }, 'Older');
  const body = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const root = room('events', 'Events', form, body);
  const ids = new Set();
  let agentId = '';
  let next = null;
  let count = 0;

  const add = (list, atTop) => {
    const rows = [];
    for (const ev of list) {
      if (ids.has(ev.id)) continue;
      ids.add(ev.id);
      rows.push(eventRow(ev, store.handleOf(ev)));
    }
    count += rows.length;
    if (atTop) tbody.prepend(...rows); else tbody.append(...rows);
    status.textContent = `${count} event${count === 1 ? '' : 's'} shown${next ? '; older ones remain' : ''}.`;
  };
  const matches = (ev) => (!f.type || evType(ev) === f.type) && (!f.category || ev.category === f.category) &&
    (!f.agent || ev.agent_id === agentId || store.handleOf(ev) === f.agent) && (!f.task || ev.task_id === f.task) &&
    (!f.trace || ev.trace_id === f.trace);

  async function page(cursor) {
    older.disabled = true;
    try {
      if (f.trace) {
        // /events has no trace filter: the trace's own route, filtered here.
        const t = await api(`/events/trace/${encodeURIComponent(f.trace)}`, { signal: ctx.signal });
        next = null;
        add((t?.events || []).filter(matches).reverse(), false);
      } else {
        const p = await api(`/events${qs({ type: f.type, category: f.category, agent_id: agentId, task_id: f.task, limit: 50, cursor })}`, { signal: ctx.signal });
        next = p?.next || null;
        add(p?.events || [], false);
      }
      older.hidden = !next;
    } finally {
      older.disabled = false;
    }
  }
  older.addEventListener('click', () => page(next).catch((err) => status.replaceChildren(errorBox(err))));

  (async () => {
    agentId = await agentIdOf(f.agent, ctx.signal);
    await page(null);
    replace(body, status, table(['When', 'Type', 'Category', 'Summary', 'Agent', 'Trace'], [], { class: 'events-table' }), older);
    body.querySelector('tbody').replaceWith(tbody);
    if (!count) body.prepend(empty('No events match.'));
  })().catch((err) => { if (ctx.alive()) replace(body, errorBox(err)); })
    .finally(() => { if (ctx.alive()) loaded(root); });

  ctx.on('snapshot', () => { if (agentSelect.options.length < 2) replace(agentSelect, seatOptions()); });
  ctx.on('event', (ev) => {
    if (evType(ev) === 'agent_turn_progress' || !matches(ev) || !root.dataset.loaded) return;
    body.querySelector('.empty')?.remove();
    add([ev], true);
  });
  return root;
}

export function eventDetail(ctx) {
  const id = ctx.params[0];
  const body = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const root = room('event', 'Event', body);
  root.dataset.event = id;
  api(`/events/${encodeURIComponent(id)}`, { signal: ctx.signal }).then((ev) => {
    const type = evType(ev);
    root.querySelector('h1').textContent = type || 'Event';
    document.title = `${type} · Crewlet`;
    const handle = store.handleOf(ev);
    replace(body,
      h('p', { class: 'big' }, ev.summary || ''),
      dl([
        ['Id', h('span', { class: 'mono' }, ev.id)],
        ['Type', h('a', { href: `#/events${qs({ type })}` }, type)],
        ['When', [ev.timestamp, ' (', when(ev.timestamp), ')']],
        ['Source', ev.source],
        ['Category', ev.category],
        ['Agent', handle ? agentLink(handle) : ev.agent_role],
        ev.task_id && ['Task', h('a', { href: `#/events${qs({ task: ev.task_id })}`, class: 'mono' }, ev.task_id)],
        ev.trace_id && ['Trace', traceLink(ev.trace_id, ev.trace_id)],
        ev.span_id && ['Span', h('span', { class: 'mono' }, `${ev.span_id}${ev.parent_span_id ? ` (parent ${ev.parent_span_id})` : ''}`)],
        ev.sender && ['Sender', ev.sender],
        ev.channel_id && ['Channel', ev.channel_id],
        ['Delegation depth', ev.delegation_depth ?? 0],
        ev.tags && Object.keys(ev.tags).length && ['Tags', Object.entries(ev.tags).map(([k, v]) => h('span', { class: 'chip' }, `${k}=${v}`))],
      ], { 'data-testid': 'event-fields' }),
      h('h2', {}, 'Payload'),
      ev.payload !== undefined ? json(ev.payload) : empty('No payload.'));
  }).catch((err) => { if (ctx.alive()) replace(body, errorBox(err)); })
    .finally(() => { if (ctx.alive()) loaded(root); });
  return root;
}
