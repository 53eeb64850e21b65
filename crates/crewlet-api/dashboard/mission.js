// Mission control: the org chart with each seat's live state, what needs
// attention, today's throughput and spend, and the live event feed.

import { store } from './live.js';
import {
  h, room, replace, loaded, num, compact, when, stateBadge, bar, section, empty, eventItem, agentLink, traceLink,
  errorBox, evType, throttle, syncFeed,
} from './ui.js';

const FEED = 40;
const QUIET = new Set(['agent_turn_progress']);

export function seatCard(seat) {
  const turn = seat.turn || {};
  const state = seat.state || 'offline';
  let detail = null;
  if (state === 'working') detail = seat.task?.summary || `${turn.phase || 'working'}`;
  else if (state === 'failed' && seat.last_error) detail = `${seat.last_error.reason}: ${seat.last_error.detail || ''}`;
  else if (state === 'afk') detail = seat.last_error?.reason || 'cannot work right now';
  else if (state === 'awaiting_sandbox') detail = `${seat.sandbox?.coding_agent || 'a coding agent'} works in a sandbox`;
  const b = seat.budget;
  return h('a', {
    class: `seat st-${state}`, href: `#/agents/${encodeURIComponent(seat.handle)}`,
    'data-seat': seat.handle, 'data-state': state, 'data-phase': state === 'working' ? turn.phase || null : null,
  },
  h('span', { class: 'seat-head' }, h('span', { class: 'seat-name' }, seat.name || seat.handle), h('span', { class: 'handle' }, '@' + seat.handle)),
  stateBadge(state, turn.phase),
  state === 'working' && turn.iteration ? h('span', { class: 'muted small' }, ` iteration ${turn.iteration}`) : null,
  detail ? h('span', { class: 'seat-detail' }, detail) : null,
  seat.kind === 'human' ? h('span', { class: 'seat-meta' }, 'human') :
    h('span', { class: 'seat-meta' }, `${compact(seat.tokens_today || 0)} tokens today`,
      b && b.max ? ` · ${Math.min(100, Math.round((b.used / b.max) * 100))}% of budget` : ''));
}

function unitTree(seats) {
  const root = { name: '', units: new Map(), seats: [] };
  for (const seat of seats) {
    let node = root;
    for (const name of seat.unit_path || []) {
      if (!node.units.has(name)) node.units.set(name, { name, units: new Map(), seats: [] });
      node = node.units.get(name);
    }
    node.seats.push(seat);
  }
  return root;
}

function unitEl(node, depth) {
  return h('section', { class: 'unit', 'data-unit': node.name, 'aria-label': node.name },
    h(depth === 0 ? 'h3' : 'h4', { class: 'unit-name' }, node.name),
    node.seats.length ? h('div', { class: 'seats' }, node.seats.map(seatCard)) : null,
    [...node.units.values()].map((u) => unitEl(u, depth + 1)));
}

export function orgChart(seats) {
  if (!seats.length) return empty('No seats yet: no company is active, or the engine has not reported.');
  const tree = unitTree(seats);
  return h('div', { class: 'org' },
    tree.seats.length ? h('section', { class: 'unit org-wide', 'aria-label': 'Org-wide roles' },
      h('h3', { class: 'unit-name' }, 'Org-wide'), h('div', { class: 'seats' }, tree.seats.map(seatCard))) : null,
    [...tree.units.values()].map((u) => unitEl(u, 0)));
}

function stats() {
  const t = store.today || {};
  const org = store.budget?.org;
  const stat = (label, value, key, cls) => h('div', { class: `stat ${cls || ''}`, 'data-stat': key },
    h('span', { class: 'stat-label' }, label), h('span', { class: 'stat-value', 'data-value': value ?? 0 }, num(value ?? 0)));
  return h('div', { class: 'stats', 'aria-label': 'Today (since midnight UTC)', role: 'group' },
    stat('Turns today', t.turns, 'turns'),
    stat('Tasks done', t.tasks_completed, 'tasks_completed', 'good'),
    stat('Tasks failed', t.tasks_failed, 'tasks_failed', t.tasks_failed ? 'bad' : ''),
    h('div', { class: 'stat', 'data-stat': 'tokens' }, h('span', { class: 'stat-label' }, 'Tokens today'),
      h('span', { class: 'stat-value', 'data-value': t.total_tokens ?? 0 }, compact(t.total_tokens ?? 0)),
      h('span', { class: 'muted small' }, `${compact(t.input_tokens ?? 0)} in · ${compact(t.output_tokens ?? 0)} out`)),
    h('div', { class: 'stat wide' }, org ? bar(org.used, org.max, 'Org budget') : h('span', { class: 'muted' }, 'No org budget')));
}

const SANDBOX_TEXT = { running: 'running', awaiting_answer: 'awaiting an answer' };

/** Coding agents in sandboxes: running, or parked on a person's answer. */
function sandboxList(seats) {
  const rows = seats.filter((s) => s.sandbox);
  if (!rows.length) return null;
  return section('Running sandboxes', h('ul', { class: 'sandboxes', 'data-testid': 'sandboxes' }, rows.map((s) => {
    const b = s.sandbox;
    return h('li', { 'data-sandbox': b.run_id, 'data-status': b.status },
      agentLink(s.handle),
      h('span', { class: 'sb-agent' }, b.coding_agent || 'coding agent'),
      h('span', { class: `badge sb-${b.status}` }, SANDBOX_TEXT[b.status] || b.status),
      when(b.started_at),
      b.question ? h('span', { class: 'sb-question' }, b.question) : null);
  })));
}

const KIND_TEXT = {
  task_failed: 'Task failed', guard_breach: 'Guard stopped a turn', budget_near: 'Budget 80% used',
  budget_exhausted: 'Budget exhausted', llm_unavailable: 'Model unavailable', mcp_server_failed: 'MCP server failed',
};

function attentionList() {
  const items = store.attention;
  if (!items.length) return empty(store.conn === 'live' || store.conn === 'polling' ? 'Nothing needs you.' : 'Nothing known (not connected).');
  return h('ul', { class: 'attention' }, items.slice(0, 12).map((a) => h('li', { class: `att att-${a.kind}`, 'data-kind': a.kind },
    h('span', { class: 'att-kind' }, KIND_TEXT[a.kind] || a.kind),
    a.handle ? agentLink(a.handle) : null,
    h('span', { class: 'att-sum' }, a.summary || ''),
    when(a.at),
    a.event_id ? h('a', { href: `#/events/${encodeURIComponent(a.event_id)}`, class: 'small' }, 'event') : null,
    a.trace_id ? traceLink(a.trace_id, 'trace') : null)));
}

export function mission(ctx) {
  const statsBox = h('div', {});
  const org = h('div', {});
  const att = h('div', {});
  const boxes = h('div', {});
  const feed = h('ol', { class: 'feed', 'aria-live': 'off', 'aria-relevant': 'additions', 'aria-label': 'Recent events' });
  const note = h('div', {});
  const root = room('mission', 'Mission control', note, statsBox,
    h('div', { class: 'mission-grid' },
      section('Organization', org),
      h('div', { class: 'side' }, boxes, section('Needs attention', att), section('Recent events', feed))));

  const shown = () => store.events.filter((e) => !QUIET.has(evType(e)));
  const paintFeed = () => {
    syncFeed(feed, shown(), (e) => eventItem(e, store.handleOf(e)), FEED);
    // Announce only what arrives after the first paint.
    if (store.loaded) feed.setAttribute('aria-live', 'polite');
  };
  const paintAll = () => {
    replace(note, store.error && !store.loaded ? errorBox(store.error) : null);
    replace(statsBox, stats());
    replace(org, orgChart(store.seatList()));
    replace(boxes, sandboxList(store.seatList()));
    replace(att, attentionList());
    paintFeed();
    if (store.loaded) loaded(root);
  };
  paintAll();
  ctx.on('snapshot', paintAll);
  ctx.on('error', paintAll);
  ctx.on('agents', () => { feed.setAttribute('aria-live', 'off'); replace(feed); paintFeed(); });
  ctx.on('today', () => replace(statsBox, stats()));
  ctx.on('attention', () => replace(att, attentionList()));
  ctx.on('seat', (seat) => {
    replace(boxes, sandboxList(store.seatList()));
    const old = org.querySelector(`[data-seat="${CSS.escape(seat.handle)}"]`);
    if (old && (old.dataset.state !== undefined)) {
      const had = document.activeElement === old;
      const fresh = seatCard(seat);
      old.replaceWith(fresh);
      if (had) fresh.focus();
    } else replace(org, orgChart(store.seatList()));
  });
  const addLive = throttle(paintFeed, 500);
  ctx.on('event', (ev) => { if (!QUIET.has(evType(ev))) addLive(); });
  return root;
}
