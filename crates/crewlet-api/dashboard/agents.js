// The seat list and the live agent page.

import { api, qs, AuthCancelled, notShown } from './api.js';
import { store } from './live.js';
import {
  h, room, replace, loaded, num, ms, when, stateBadge, bar, section, empty, table, eventItem,
  agentLink, traceLink, errorBox, evType, short, throttle, uuid, syncFeed,
} from './ui.js';

const PHASES = ['plan', 'execute', 'review'];

// ---- #/agents ----------------------------------------------------------------

function seatRow(seat) {
  const b = seat.budget;
  return h('tr', { 'data-seat': seat.handle, 'data-state': seat.state || 'offline' },
    h('td', {}, agentLink(seat.handle), h('div', { class: 'muted small' }, seat.name || '')),
    h('td', {}, (seat.unit_path || []).join(' / ') || h('span', { class: 'muted' }, 'org-wide')),
    h('td', {}, stateBadge(seat.state, seat.turn?.phase)),
    h('td', { class: 'wrap' }, seat.task?.summary || (seat.state === 'failed' ? seat.last_error?.reason : '') || ''),
    h('td', { class: 'num' }, seat.kind === 'human' ? '–' : num(seat.tokens_today || 0)),
    h('td', { class: 'num' }, b && b.max ? `${Math.round((b.used / b.max) * 100)}%` : '–'));
}

export function agents(ctx) {
  const body = h('div', {});
  const root = room('agents', 'Agents', body);
  const paint = () => {
    const seats = store.seatList();
    if (!store.loaded) {
      replace(body, store.error ? errorBox(store.error) : h('p', { class: 'loading' }, 'Loading…'));
      return;
    }
    const counts = {};
    for (const s of seats) counts[s.state] = (counts[s.state] || 0) + 1;
    replace(body,
      h('p', { class: 'summary' }, `${seats.length} seats: `, Object.entries(counts).map(([k, n]) => h('span', { class: 'chip' }, `${n} ${k}`))),
      seats.length ? table(['Seat', 'Unit', 'State', 'Working on', 'Tokens today', 'Budget'], seats.map(seatRow), { class: 'seats-table' })
        : empty('No seats yet.'));
    loaded(root);
  };
  paint();
  ctx.on('snapshot', paint);
  ctx.on('error', paint);
  ctx.on('seat', (seat) => {
    const old = body.querySelector(`tr[data-seat="${CSS.escape(seat.handle)}"]`);
    if (old) old.replaceWith(seatRow(seat)); else paint();
  });
  return root;
}

// ---- #/agents/{handle} ------------------------------------------------------------

function rail(phase, iteration, doneSet) {
  const active = PHASES.indexOf(phase);
  return h('ol', { class: 'rail', 'aria-label': 'Turn phases', 'data-testid': 'phase-rail' },
    PHASES.map((p, i) => {
      const status = i === active ? 'active' : doneSet.has(p) || (active > i) ? 'done' : 'pending';
      return h('li', { 'data-phase': p, class: status, 'aria-current': i === active ? 'step' : null },
        h('span', { class: 'rail-dot', 'aria-hidden': 'true' }), h('span', {}, p[0].toUpperCase() + p.slice(1)),
        i === active && iteration ? h('span', { class: 'small muted' }, ` · iteration ${iteration}`) : null,
        h('span', { class: 'sr-only' }, status === 'active' ? ' (current)' : status === 'done' ? ' (done)' : ''));
    }));
}

function toolList(tools) {
  if (!tools || !tools.length) return null;
  return h('ul', { class: 'tools-run', 'data-testid': 'tool-calls' }, tools.map((t) => h('li', { class: t.ok ? 'ok' : 'bad' },
    h('span', { class: 'mono' }, t.name), ` ${t.ok ? 'ok' : 'failed'} · ${ms(t.duration_ms)}`)));
}

function phaseRecord(ev) {
  const p = ev.payload || {};
  return h('article', { class: `record ${p.outcome === 'failed' ? 'failed' : ''}`, 'data-testid': 'phase-record', 'data-phase': p.phase, 'data-event': ev.id },
    h('header', {}, h('strong', {}, `${p.phase || '?'} · iteration ${p.iteration ?? '?'}`),
      h('span', { class: `tag ${p.outcome === 'failed' ? 'bad' : 'good'}` }, p.outcome || 'ok'),
      h('span', { class: 'muted small' }, `${p.model || ''} · ${num(p.input_tokens)} in / ${num(p.output_tokens)} out · ${ms(p.duration_ms)}`),
      h('a', { href: `#/events/${encodeURIComponent(ev.id)}`, class: 'small' }, 'event')),
    toolList(p.tool_executions),
    h('details', {}, h('summary', {}, 'Response'), h('pre', { class: 'text' }, p.response ?? notShown())),
    h('details', {}, h('summary', {}, 'Prompt'), h('pre', { class: 'text' }, p.prompt ?? notShown())));
}

function memoryView(m) {
  const diary = m.diary?.items || [];
  const episodes = m.episodes?.items || [];
  const skills = m.skills || [];
  const profiles = m.profiles || [];
  const on = m.onboarding;
  return h('div', { class: 'memory', 'data-testid': 'memory' },
    h('p', {}, on?.onboarded ? ['Onboarded ', when(on.onboarded_at)] : 'Not onboarded yet.'),
    h('details', { open: true }, h('summary', {}, `Diary (${m.diary?.total ?? diary.length})`),
      diary.length ? h('ul', { class: 'diary' }, diary.map((d) => h('li', {},
        h('span', { class: `tag ${d.kind === 'diary_long' ? '' : 'muted'}` }, d.kind === 'diary_long' ? 'long' : 'short'),
        h('span', { class: 'wrap' }, d.content), ' ', when(d.created_at),
        d.ttl_until ? h('span', { class: 'muted small' }, ` · until ${d.ttl_until}`) : null))) : empty('Nothing written.')),
    h('details', {}, h('summary', {}, `Episodes (${m.episodes?.raw ?? 0} raw, ${m.episodes?.compacted ?? 0} compacted)`),
      episodes.length ? table(['Ended', 'Task', 'Outcome', 'Tools', 'Took'], episodes.map((e) => h('tr', {},
        h('td', {}, when(e.ended_at)), h('td', { class: 'wrap' }, e.task_summary, h('div', { class: 'muted small' }, e.plan_summary)),
        h('td', {}, e.review_outcome || '–'), h('td', { class: 'mono small' }, (e.tool_sequence || []).join(' → ')),
        h('td', { class: 'num' }, ms(e.duration_ms))))) : empty('No episodes.')),
    h('details', {}, h('summary', {}, `Skills (${skills.length})`),
      skills.length ? skills.map((k) => h('details', { class: 'skill' },
        h('summary', {}, h('strong', {}, k.name), ` v${k.version} · ${k.state} · used ${k.use_count}×`),
        h('p', {}, k.description), h('pre', { class: 'text' }, k.body))) : empty('No skills.')),
    h('details', {}, h('summary', {}, `Profiles (${profiles.length})`),
      profiles.length ? table(['Who', 'Platform', 'Summary', 'Seen'], profiles.map((p) => h('tr', {},
        h('td', {}, p.display_name || p.subject), h('td', {}, p.platform), h('td', { class: 'wrap' }, p.summary),
        h('td', {}, `${p.interaction_count}× `, when(p.last_seen_at))))) : empty('Knows nobody yet.')));
}

function turnsTable(list) {
  if (!list.length) return empty('No finished turns yet.');
  return table(['Ended', 'Trigger', 'Decision', 'Iterations', 'Tokens', 'Took', 'Trace'], list.map((ev) => {
    const p = ev.payload || {};
    return h('tr', { 'data-event': ev.id },
      h('td', {}, when(ev.timestamp)),
      h('td', { class: 'wrap' }, p.trigger?.summary || ev.summary || ''),
      h('td', {}, h('span', { class: `tag ${p.decision === 'failed' ? 'bad' : ''}` }, p.decision || '?')),
      h('td', { class: 'num' }, p.iterations ?? '–'),
      h('td', { class: 'num' }, num(p.total_tokens)),
      h('td', { class: 'num' }, ms(p.duration_ms)),
      h('td', {}, traceLink(ev.trace_id)));
  }), { 'data-testid': 'recent-turns' });
}

function taskForm(handle, onPosted) {
  let key = null;
  const text = h('textarea', { id: 'task-text', name: 'text', rows: 3, required: true, 'data-testid': 'task-text' });
  const title = h('input', { id: 'task-title', name: 'title', 'data-testid': 'task-title', autocomplete: 'off' });
  const prio = h('select', { id: 'task-priority', name: 'priority', 'data-testid': 'task-priority' },
    ['low', 'normal', 'high', 'urgent'].map((p) => h('option', { value: p, selected: p === 'normal' }, p)));
  const btn = h('button', { type: 'submit', 'data-testid': 'task-submit' }, `Give ${handle} the task`);
  const result = h('div', { class: 'task-result', 'data-testid': 'task-result', 'aria-live': 'polite' });
  const form = h('form', { class: 'task-form', 'data-testid': 'task-form' },
    h('label', { for: 'task-text' }, 'What should they do?'), text,
    h('div', { class: 'row' },
      h('div', { class: 'grow' }, h('label', { for: 'task-title' }, 'Title (optional)'), title),
      h('div', {}, h('label', { for: 'task-priority' }, 'Priority'), prio)),
    h('div', { class: 'row end' }, btn), result);
  form.addEventListener('input', () => { key = null; });
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (!text.value.trim()) { text.focus(); return; }
    key = key || uuid();
    btn.disabled = true;
    replace(result, h('p', { class: 'muted' }, 'Sending…'));
    try {
      const body = { text: text.value.trim(), priority: prio.value };
      if (title.value.trim()) body.title = title.value.trim();
      const r = await api(`/agents/${encodeURIComponent(handle)}/tasks`, { method: 'POST', body, write: true, headers: { 'Idempotency-Key': key } });
      key = null;
      text.value = '';
      title.value = '';
      replace(result, onPosted(r));
    } catch (err) {
      replace(result, err instanceof AuthCancelled ? h('p', { class: 'error' }, 'No token given: nothing was sent.') : errorBox(err));
    } finally {
      btn.disabled = false;
    }
  });
  return form;
}

export function agent(ctx) {
  const handle = ctx.params[0];
  const title = h('span', {}, handle);
  const head = h('div', { class: 'agent-head' });
  const turnBox = h('div', { 'data-testid': 'current-turn' });
  const budgetBox = h('div', {});
  const turnsBox = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const memBox = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const activity = h('ol', { class: 'feed', 'aria-live': 'off', 'aria-relevant': 'additions', 'aria-label': `Events of ${handle}` });
  const formBox = h('div', {});
  const follow = { trace: null, list: null, ids: new Set() };
  const root = room('agent', '', head,
    h('div', { class: 'agent-grid' },
      h('div', {},
        section('Current turn', turnBox),
        section('Recent turns', turnsBox),
        section('Memory', memBox)),
      h('div', { class: 'side' },
        h('section', { class: 'panel', 'aria-labelledby': 'give-task' }, h('h2', { id: 'give-task' }, `Give ${handle} a task`), formBox),
        section('Budget', budgetBox),
        section('Activity', activity))));
  root.querySelector('h1').append(title);
  root.dataset.handle = handle;

  let agentId = null;
  let shownTurn = null;
  const records = new Map(); // event id -> agent_phase_completed (with payload)
  const recordEls = new Map(); // event id -> its card, kept so open details stay open
  const card = (ev) => recordEls.get(ev.id) || recordEls.set(ev.id, phaseRecord(ev)).get(ev.id);
  const live = { turn_id: null, phase: null, iteration: null, response: '', tools: [], model: null };
  const mine = (ev) => store.handleOf(ev) === handle || (agentId && ev.agent_id === agentId);

  const seatNow = () => store.seats.get(handle);

  function takeSeatTurn(seat) {
    const t = seat?.turn;
    if (seat?.state === 'working' && t) {
      Object.assign(live, {
        turn_id: t.turn_id, phase: t.phase, iteration: t.iteration, model: t.model,
        response: t.response ?? live.response, tools: t.tool_executions || [],
      });
      shownTurn = t.turn_id || shownTurn;
    } else {
      Object.assign(live, { phase: null, response: '', tools: [] });
    }
  }

  function paintHead() {
    const seat = seatNow();
    if (!seat) {
      replace(head, store.loaded ? errorBox({ body: { error: 'not_found', reason: `no seat @${handle} in the snapshot` } }) : null);
      return;
    }
    title.textContent = `${seat.name || handle} `;
    title.append(h('span', { class: 'handle' }, '@' + handle));
    document.title = `${seat.name || handle} · Crewlet`;
    replace(head,
      h('div', { class: 'row wrap-row', 'data-seat': handle, 'data-state': seat.state || 'offline', 'data-testid': 'agent-state' },
        stateBadge(seat.state, seat.turn?.phase),
        h('span', {}, (seat.unit_path || []).join(' / ') || 'org-wide'),
        seat.manager ? h('span', {}, 'reports to ', agentLink(seat.manager)) : null,
        seat.reports?.length ? h('span', {}, 'manages ', seat.reports.map((r, i) => [i ? ', ' : '', agentLink(r)])) : null,
        h('span', { class: 'muted' }, `${num(seat.tokens_today || 0)} tokens today`)),
      seat.state === 'failed' && seat.last_error ? h('p', { class: 'error' },
        h('strong', {}, seat.last_error.reason), ': ', seat.last_error.detail || '', ' ', when(seat.last_error.at),
        seat.last_error.event_id ? [' ', h('a', { href: `#/events/${encodeURIComponent(seat.last_error.event_id)}` }, 'event')] : null) : null);
    replace(budgetBox, seat.budget ? bar(seat.budget.used, seat.budget.max, 'Seat budget') : h('p', { class: 'muted' }, 'No per-seat cap.'));
  }

  const responseEl = h('pre', { class: 'text live-text', 'data-testid': 'live-response', 'aria-live': 'off' });
  function paintTurn() {
    const seat = seatNow();
    const working = seat?.state === 'working';
    const turnRecords = [...records.values()].filter((ev) => ev.payload?.turn_id === shownTurn)
      .sort((a, b) => (a.id < b.id ? -1 : 1));
    const done = new Set(turnRecords.map((ev) => ev.payload.phase));
    const finished = turnRecords.some((ev) => ev.payload.phase === live.phase && ev.payload.iteration === live.iteration);
    responseEl.textContent = live.response || '';
    replace(turnBox,
      working ? h('p', {}, h('strong', {}, seat.task?.summary || 'Working'), ' ', seat.task?.started_at ? ['started ', when(seat.task.started_at)] : null,
        seat.task?.trace_id ? [' · ', traceLink(seat.task.trace_id, 'trace')] : null) :
        h('p', { class: 'muted' }, shownTurn ? 'Idle. The last turn:' : `${handle} is ${seat?.state || 'not reporting'}: no turn running.`),
      rail(working ? live.phase : null, working ? live.iteration : null, working ? done : new Set()),
      working && !finished ? h('div', { class: 'inflight', 'data-testid': 'inflight' },
        h('p', { class: 'small muted' }, `${live.phase || ''} · iteration ${live.iteration ?? '?'} · ${live.model || ''} · streaming`),
        responseEl, toolList(live.tools)) : null,
      turnRecords.length ? h('div', { class: 'records', 'data-testid': 'phase-records' }, turnRecords.map(card)) : null);
  }
  const paintTurnSoon = throttle(paintTurn, 150);

  const recentTurns = [];
  function paintTurns() { replace(turnsBox, turnsTable(recentTurns)); }

  function paintActivity() {
    syncFeed(activity, store.events.filter((ev) => evType(ev) !== 'agent_turn_progress' && mine(ev)), (ev) => eventItem(ev, handle), 15);
    if (!activity.children.length) activity.append(h('li', { class: 'empty' }, 'Nothing recent.'));
    if (store.loaded) activity.setAttribute('aria-live', 'polite');
  }

  function onPosted(r) {
    follow.trace = r.trace_id;
    follow.ids = new Set();
    follow.list = h('ol', { class: 'feed', 'data-testid': 'task-trace', 'aria-label': 'The task so far' });
    api(`/events/trace/${encodeURIComponent(r.trace_id)}`, { signal: ctx.signal }).then((t) => {
      for (const ev of t?.events || []) addFollow(ev);
    }).catch(() => {});
    for (const ev of [...store.events].reverse()) if (ev.trace_id === r.trace_id) addFollow(ev);
    return [h('p', { class: 'good' }, `Task ${short(r.task_id)} is on ${r.handle || handle}'s inbox. `,
      h('a', { href: `#/traces/${encodeURIComponent(r.trace_id)}`, 'data-testid': 'task-trace-link' }, 'Open its trace')),
    follow.list];
  }
  function addFollow(ev) {
    if (!follow.list || follow.ids.has(ev.id) || evType(ev) === 'agent_turn_progress') return;
    follow.ids.add(ev.id);
    follow.list.append(eventItem(ev, store.handleOf(ev)));
  }

  const seat0 = seatNow();
  const paintForm = () => {
    const human = seatNow()?.kind === 'human';
    if (human && !formBox.dataset.human) replace(formBox, h('p', { class: 'muted' }, 'A human seat: it takes no turns.'));
    else if (!human && !formBox.firstChild) replace(formBox, taskForm(handle, onPosted));
    formBox.dataset.human = human ? 'true' : '';
  };
  paintForm();
  takeSeatTurn(seat0);
  paintHead();
  paintTurn();
  paintActivity();

  // Seat id, then what needs it.
  api(`/agents/${encodeURIComponent(handle)}`, { signal: ctx.signal }).then(async (a) => {
    agentId = a?.id || null;
    if (!agentId || !ctx.alive()) return;
    paintActivity();
    const [turns, phases] = await Promise.all([
      api(`/events${qs({ agent_id: agentId, type: 'agent_turn_completed', limit: 10 })}`, { signal: ctx.signal }),
      api(`/events${qs({ agent_id: agentId, type: 'agent_phase_completed', limit: 12 })}`, { signal: ctx.signal }),
    ]);
    recentTurns.push(...(turns?.events || []));
    paintTurns();
    for (const ev of phases?.events || []) records.set(ev.id, ev);
    if (!shownTurn && phases?.events?.length) shownTurn = phases.events[0].payload?.turn_id || null;
    paintTurn();
  }).catch((err) => {
    if (!ctx.alive()) return;
    replace(turnsBox, err.status === 404 ? empty(`No agent seat @${handle}.`) : errorBox(err));
  }).finally(() => { if (ctx.alive()) loaded(root); });

  api(`/agents/${encodeURIComponent(handle)}/memory`, { signal: ctx.signal }).then((m) => {
    replace(memBox, memoryView(m));
  }).catch((err) => {
    if (!ctx.alive()) return;
    if (err.status === 503 || err.status === 404) {
      replace(memBox, h('p', { class: 'muted', 'data-testid': 'memory-off' }, err.status === 404 ? 'No memory: ' : 'Memory is off: ',
        err.body?.reason || (err.status === 404 ? 'not an agent seat' : 'not configured')));
    } else replace(memBox, errorBox(err));
  });

  ctx.on('snapshot', () => { takeSeatTurn(seatNow()); paintHead(); paintTurn(); paintActivity(); paintForm(); });
  ctx.on('agents', () => { activity.setAttribute('aria-live', 'off'); replace(activity); paintActivity(); });
  ctx.on('seat', (seat) => {
    if (seat.handle !== handle) return;
    takeSeatTurn(seat);
    paintHead();
    paintTurnSoon();
  });
  ctx.on('event', (ev) => {
    if (follow.trace && ev.trace_id === follow.trace) addFollow(ev);
    if (!mine(ev)) return;
    const type = evType(ev);
    const p = ev.payload || {};
    if (type === 'agent_turn_progress') {
      if (p.turn_id && p.turn_id !== live.turn_id) shownTurn = p.turn_id;
      Object.assign(live, {
        turn_id: p.turn_id || live.turn_id, phase: p.phase || live.phase, iteration: p.iteration ?? live.iteration,
        response: p.response ?? live.response, tools: p.tool_executions || live.tools,
      });
      if (seatNow()?.state === 'working') {
        responseEl.textContent = live.response || '';
        paintTurnSoon();
      }
      return;
    }
    if (type === 'agent_phase_completed' && ev.payload) {
      records.set(ev.id, ev);
      if (p.turn_id) shownTurn = p.turn_id;
      paintTurn();
    } else if (type === 'task_started' && p.turn_id) {
      shownTurn = p.turn_id;
      paintTurn();
    } else if (type === 'agent_turn_completed' && ev.payload) {
      recentTurns.unshift(ev);
      paintTurns();
    }
    paintActivity();
  });
  return root;
}

