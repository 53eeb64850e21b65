// A stand-in for the crewlet API, for looking at the dashboard in a browser
// without the engine: node built-ins only.
//
//   node tests/browser/mock-server.mjs            # http://127.0.0.1:8787/dashboard
//
// Env: PORT (8787), HOST (127.0.0.1), MOCK_TOKEN (mock-token: the bearer
// token writes and /config need), MOCK_READ_AUTH=1 (reads need it too),
// MOCK_NO_WS=1 (refuse the socket: the page falls back to polling),
// MOCK_MEMORY=off (GET /agents/{id}/memory answers 503), MOCK_SPEED (1: turn
// pacing multiplier, 0.2 is 5x faster).
//
// Shapes follow docs/dashboard.md, docs/api.md and docs/openapi.json.

import http from 'node:http';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ASSETS = path.resolve(HERE, '../../crates/crewlet-api/dashboard');
const COMPANY = 'Kestrel Labs';
const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
const TYPES = {
  'text/javascript': ['.js', '.mjs'], 'text/css': ['.css'], 'text/html; charset=utf-8': ['.html'],
  'image/svg+xml': ['.svg'], 'application/json': ['.json'],
};
const MIME = Object.fromEntries(Object.entries(TYPES).flatMap(([t, exts]) => exts.map((e) => [e, t])));

// ---- ids ---------------------------------------------------------------------

let lastMs = 0;
let seq = 0;
/** uuid v7: monotonic for "now", or at a given past millisecond. */
function uuid7(at) {
  let ms = at ?? Date.now();
  let counter = crypto.randomInt(0, 4096);
  if (at === undefined) {
    if (ms <= lastMs) { ms = lastMs; seq++; } else { lastMs = ms; seq = 0; }
    counter = seq;
  }
  const b = crypto.randomBytes(16);
  b.writeUIntBE(ms, 0, 6);
  b[6] = 0x70 | ((counter >> 8) & 0x0f);
  b[7] = counter & 0xff;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = b.toString('hex');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}
function uuid5(name) {
  const b = crypto.createHash('sha1').update(name).digest().subarray(0, 16);
  b[6] = (b[6] & 0x0f) | 0x50;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = b.toString('hex');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}
const hex = (n) => crypto.randomBytes(n).toString('hex');
const iso = (ms) => new Date(ms).toISOString();
const isoPlus = (ms) => new Date(ms).toISOString().replace('Z', '+00:00');

// Deterministic history (mulberry32).
function prng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// ---- the company ----------------------------------------------------------------

const SEATS = [
  { handle: 'ceo', name: 'Chief Executive', unit_path: [], manager: null, reports: ['cto', 'growth-lead', 'support'], cap: 400000 },
  { handle: 'founder', name: 'Founder', kind: 'human', unit_path: [], manager: null, reports: ['ceo'] },
  { handle: 'cto', name: 'CTO', unit_path: ['Engineering'], manager: 'ceo', reports: ['eng', 'qa'], cap: 300000 },
  { handle: 'eng', name: 'Engineer', unit_path: ['Engineering', 'Platform'], manager: 'cto', reports: [], cap: 500000 },
  { handle: 'qa', name: 'QA Engineer', unit_path: ['Engineering', 'Platform'], manager: 'cto', reports: [] },
  { handle: 'growth-lead', name: 'Growth Lead', unit_path: ['Growth'], manager: 'ceo', reports: ['writer'] },
  { handle: 'writer', name: 'Writer', unit_path: ['Growth', 'Content'], manager: 'growth-lead', reports: [], cap: 120000 },
  { handle: 'support', name: 'Support', unit_path: ['Support'], manager: 'ceo', reports: [] },
].map((s) => ({ kind: 'agent', ...s, id: uuid5(`${COMPANY}:${s.handle}`) }));
const SEAT = new Map(SEATS.map((s) => [s.handle, s]));
const UNITS = [
  { name: 'Engineering', kind: 'department', lead: 'cto', children: [{ name: 'Platform', kind: 'team', lead: 'cto', lead_inherited: true }] },
  { name: 'Growth', kind: 'department', lead: 'growth-lead', children: [{ name: 'Content', kind: 'team', lead: 'growth-lead', lead_inherited: true }] },
  { name: 'Support', kind: 'department', lead: 'support', children: [] },
];
const MODELS = {
  plan: ['gpt-4o-mini', 'openai'], execute: ['claude-sonnet-4', 'anthropic'], review: ['gpt-4o-mini', 'openai'], auxiliary: ['gpt-4o-mini', 'openai'],
};
const FAILED_TYPES = new Set(['task_failed', 'llm_unavailable', 'budget_exhausted', 'turn.guard_breach', 'mcp_server_failed']);
const CATEGORY = {
  task_created: 'task', task_started: 'task', task_completed: 'task', task_failed: 'task', schedule_fired: 'task',
  agent_turn_completed: 'system', agent_turn_progress: 'system', agent_phase_started: 'system', agent_phase_completed: 'system',
  budget_exhausted: 'system', 'turn.guard_breach': 'system', llm_unavailable: 'system', provider_fallback: 'system',
  mcp_server_failed: 'system', config_revision_activated: 'system', external_notification: 'notification',
  notification_skipped: 'notification', raw_webhook: 'webhook', diary_written: 'learning', episode_recorded: 'learning',
  message_sent: 'communication',
};
const TASKS = [
  'Fix the flaky login test', 'Write release notes for 0.4', 'Triage new GitHub issues', 'Review the pricing page copy',
  'Plan the Q1 roadmap', 'Answer the customer about SSO', 'Upgrade the CI runners', 'Draft the weekly update',
  'Investigate the 502s on /api/export', 'Summarize yesterday\'s support tickets',
];

export function createMock(opts = {}) {
  const token = opts.token ?? process.env.MOCK_TOKEN ?? 'mock-token';
  const readAuth = opts.readAuth ?? process.env.MOCK_READ_AUTH === '1';
  const noWs = opts.noWs ?? process.env.MOCK_NO_WS === '1';
  const memoryOff = opts.memoryOff ?? process.env.MOCK_MEMORY === 'off';
  const speed = Number(opts.speed ?? process.env.MOCK_SPEED ?? 1) || 1;
  const started = Date.now();
  const events = []; // stored, ascending by id
  const byId = new Map();
  const clients = new Set();
  const timers = new Set();
  const state = new Map(SEATS.map((s) => [s.handle, {
    state: s.kind === 'human' ? 'offline' : 'idle', task: null, turn: null, last_error: null, sandbox: null,
  }]));
  const ledger = new Map(SEATS.map((s) => [s.handle, 0]));
  let ledgerRefused = null;
  const revisions = [];

  // ---- events ----------------------------------------------------------------

  function make(type, { seat, at, trace, span, parent, summary, payload, task, source = 'engine' }) {
    const s = seat && SEAT.get(seat);
    return {
      id: uuid7(at), type, timestamp: iso(at ?? Date.now()), source, category: CATEGORY[type] || 'system', summary: summary || type,
      agent_id: s ? s.id : null, agent_role: s ? s.name : null, task_id: task || null, channel_id: null, sender: null,
      trace_id: trace || null, span_id: span || null, parent_span_id: parent || null, delegation_depth: 0,
      ...(s ? { tags: { agent_handle: s.handle } } : {}),
      ...(payload ? { payload } : {}),
    };
  }
  const failed = (ev) => FAILED_TYPES.has(ev.type) || (ev.type === 'agent_phase_completed' && ev.payload?.outcome === 'failed');
  const row = (ev) => {
    const { payload, ...rest } = ev;
    return { ...rest, failed: failed(ev) };
  };
  function store(ev) {
    events.push(ev);
    byId.set(ev.id, ev);
    if (ev.type === 'agent_phase_completed' && ev.tags?.agent_handle) {
      const h = ev.tags.agent_handle;
      ledger.set(h, ledger.get(h) + (ev.payload.input_tokens || 0) + (ev.payload.output_tokens || 0));
    }
  }
  function emit(type, o) {
    const ev = make(type, o);
    if (type !== 'agent_turn_progress') store(ev);
    broadcast({ kind: 'event', data: { ...ev, failed: failed(ev) } });
    return ev;
  }

  // ---- seats ------------------------------------------------------------------

  const todayStart = () => { const d = new Date(); d.setUTCHours(0, 0, 0, 0); return d.getTime(); };
  function tokensSince(handle, since) {
    let n = 0;
    for (let i = events.length - 1; i >= 0; i--) {
      const ev = events[i];
      if (Date.parse(ev.timestamp) < since) break;
      if (ev.type === 'agent_phase_completed' && ev.tags?.agent_handle === handle) n += ev.payload.input_tokens + ev.payload.output_tokens;
    }
    return n;
  }
  function seatView(s) {
    const st = state.get(s.handle);
    return {
      handle: s.handle, name: s.name, kind: s.kind, unit_path: s.unit_path, manager: s.manager, reports: s.reports,
      state: st.state, task: st.task, turn: st.turn, last_error: st.last_error, sandbox: st.sandbox,
      budget: s.cap ? { used: ledger.get(s.handle), max: s.cap } : null,
      tokens_today: s.kind === 'human' ? 0 : tokensSince(s.handle, todayStart()),
    };
  }
  function setSeat(handle, patch) {
    Object.assign(state.get(handle), patch);
    broadcast({ kind: 'seat', data: seatView(SEAT.get(handle)) });
  }

  // ---- turns ---------------------------------------------------------------------

  const words = 'the plan is to read the failing code path reproduce it with a focused test change the smallest thing that fixes it and report what changed and why so the reviewer can check it quickly'.split(' ');
  function phaseTokens(rand, phase) {
    const r = { plan: [800, 1600, 120, 300], execute: [2200, 4200, 300, 900], review: [600, 900, 60, 140], auxiliary: [300, 400, 20, 60] }[phase];
    return [Math.round(r[0] + rand() * r[1]), Math.round(r[2] + rand() * r[3])];
  }
  function phasePayload(rand, phase, turnId, iteration, seat, summary, tools, outcome = 'ok', aux) {
    const [input, output] = phaseTokens(rand, phase);
    const [model, provider] = MODELS[phase];
    return {
      phase, model, provider, input_tokens: input, output_tokens: output, cache_read_tokens: 0, calls: tools.length + 1,
      duration_ms: Math.round(800 + rand() * 4000), tool_executions: tools, turn_id: turnId, iteration, outcome,
      ...(aux ? { auxiliary: aux } : {}),
      prompt: `You are ${seat.name} (@${seat.handle}) at ${COMPANY}.\nPhase: ${phase}, iteration ${iteration}.\n\nTask: ${summary}\n\n<script>alert("prompts are shown as text")</script>`,
      response: `${phase === 'plan' ? '1. Read the code\n2. Reproduce\n3. Fix and test' : phase === 'review' ? 'DONE: the change is in and tested.' : `Ran ${tools.map((t) => t.name).join(', ') || 'nothing'}; ${words.slice(0, 20).join(' ')}.`}`,
    };
  }
  const toolsFor = (rand, phase) => (phase === 'execute' ? [
    { name: 'read_file', ok: true, duration_ms: Math.round(5 + rand() * 40) },
    { name: 'run_tests', ok: rand() > 0.2, duration_ms: Math.round(800 + rand() * 3000) },
  ] : []);

  /** A finished turn in the past, written straight to the store. */
  function pastTurn(rand, handle, at, { fail, summary, trace = hex(16), parentSpan = null, source = 'api' } = {}) {
    const seat = SEAT.get(handle);
    const task = uuid7(at);
    const turnId = uuid7(at);
    const root = hex(8);
    const span = hex(8);
    let t = at;
    const put = (type, o) => store(make(type, { seat: handle, task, trace, at: (t += Math.round(500 + rand() * 4000)), ...o }));
    put('task_created', { span: root, parent: parentSpan, summary: `task for ${handle}: ${summary}`, source, payload: { text: summary, priority: 'normal' } });
    put('task_started', { span, parent: root, summary: `${handle} started: ${summary}`, payload: { turn_id: turnId, trigger: { source, sender: null, channel: null, task_id: task, delegation_depth: 0, summary } } });
    let input = 0; let output = 0;
    const phases = fail ? ['plan', 'execute'] : ['plan', 'execute', 'review'];
    for (const phase of phases) {
      const ps = hex(8);
      const outcome = fail && phase === 'execute' ? 'failed' : 'ok';
      const p = phasePayload(rand, phase, turnId, 1, seat, summary, toolsFor(rand, phase), outcome);
      input += p.input_tokens; output += p.output_tokens;
      put('agent_phase_completed', { span: ps, parent: span, summary: `${handle} ${phase} ${outcome}`, payload: p });
    }
    if (rand() > 0.4) {
      const p = phasePayload(rand, 'auxiliary', turnId, 0, seat, summary, [], 'ok', rand() > 0.5 ? 'persist_decider' : 'skill_synthesizer');
      input += p.input_tokens; output += p.output_tokens;
      put('agent_phase_completed', { span: hex(8), parent: span, summary: `${handle} auxiliary ${p.auxiliary}`, payload: p });
    }
    const decision = fail ? 'failed' : 'done';
    put('agent_turn_completed', {
      span, parent: root, summary: `${handle} turn ${decision}`,
      payload: { turn_id: turnId, decision, iterations: 1, models: ['gpt-4o-mini', 'claude-sonnet-4'], trigger: { source, sender: null, channel: null, task_id: task, delegation_depth: 0, summary }, input_tokens: input, output_tokens: output, cache_read_tokens: 0, total_tokens: input + output, duration_ms: t - at },
    });
    if (fail) {
      put(fail, { span, parent: root, summary: `${handle}: ${fail.replace('_', ' ')}`, payload: { turn_id: turnId, reason: fail, detail: 'provider answered 503 three times', will_retry: false } });
      put('task_failed', { span, parent: root, summary: `task failed: ${summary}`, payload: { turn_id: turnId, reason: fail, detail: 'provider answered 503 three times', will_retry: false } });
    } else {
      put('task_completed', { span, parent: root, summary: `done: ${summary}`, payload: { turn_id: turnId, decision: 'done', final_artifact: 'A short report.' } });
    }
    return { trace, task, turnId, end: t };
  }

  function history() {
    const rand = prng(42);
    const agents = SEATS.filter((s) => s.kind === 'agent' && s.handle !== 'eng').map((s) => s.handle);
    const now = Date.now();
    for (let day = 29; day >= 0; day--) {
      const n = 1 + Math.floor(rand() * 3);
      for (let i = 0; i < n; i++) {
        const at = now - day * 86400000 - Math.round((1 + rand() * 20) * 3600000);
        if (at > now - 600000) continue;
        const handle = rand() > 0.5 ? 'eng' : agents[Math.floor(rand() * agents.length)];
        pastTurn(rand, handle, at, { summary: TASKS[Math.floor(rand() * TASKS.length)] });
      }
    }
    // A webhook that woke nobody, and one that woke support.
    const hook = (at, handle) => {
      const trace = hex(16);
      const span = hex(8);
      store(make('raw_webhook', { at, trace, span, source: 'api', summary: 'github issues.opened acme/app#42', payload: { source: 'github', handle: null, notification: { kind: 'issues.opened', title: 'Export fails', sender: 'octocat' } } }));
      if (!handle) {
        store(make('notification_skipped', { at: at + 40, trace, span: hex(8), parent: span, source: 'router', summary: 'notification skipped: no seat mentioned', payload: { reason: 'no_seat_mentioned', webhook_event_id: events[events.length - 1].id, source: 'github', kind: 'issues.opened', delivery_key: hex(8), channel: 'acme/app', handle: null } }));
      } else {
        const ns = hex(8);
        store(make('external_notification', { at: at + 40, trace, span: ns, parent: span, seat: handle, source: 'router', summary: `routed to ${handle}`, payload: { handle, rule: 'mention' } }));
        pastTurn(rand, handle, at + 80, { summary: 'Reply to acme/app#42: export fails', trace, parentSpan: ns, source: 'github' });
      }
    };
    hook(now - 3 * 3600000, null);
    hook(now - 2 * 3600000, 'support');
    // Trouble, for the attention queue.
    const w = pastTurn(rand, 'writer', now - 26 * 3600000, { summary: 'Draft the launch blog post' });
    ledger.set('writer', 120400);
    ledgerRefused = null;
    store(make('budget_exhausted', { at: w.end + 1000, seat: 'writer', trace: w.trace, span: hex(8), summary: 'writer budget exhausted (120,400 of 120,000)', payload: { scope: 'agent', used: 120400, max: 120000 } }));
    const g = pastTurn(rand, 'cto', now - 5 * 86400000, { summary: 'Plan the Q1 roadmap' });
    store(make('turn.guard_breach', { at: g.end + 500, seat: 'cto', trace: g.trace, span: hex(8), summary: 'cto turn stopped: max_iter', payload: { kind: 'max_iter', detail: '8 iterations without DONE', turn_id: g.turnId, iteration: 8 } }));
    const q = pastTurn(rand, 'qa', now - 40 * 60000, { summary: 'Run the regression suite', fail: 'llm_unavailable' });
    const qf = events[events.length - 1];
    state.get('qa').state = 'failed';
    state.get('qa').last_error = { reason: 'llm_unavailable', detail: 'provider answered 503 three times', at: qf.timestamp, event_id: qf.id };
    // Coding agents: one at work, one parked on a person's answer.
    Object.assign(state.get('cto'), {
      state: 'awaiting_sandbox',
      sandbox: { run_id: uuid5('sandbox:cto'), task_id: uuid5('task:cto-sb'), coding_agent: 'claude-code', backend: 'local', status: 'running', question: null, started_at: isoPlus(now - 12 * 60000) },
    });
    state.get('support').sandbox = { run_id: uuid5('sandbox:support'), task_id: uuid5('task:support-sb'), coding_agent: 'opencode', backend: 'e2b', status: 'awaiting_answer', question: 'Should the export keep the legacy CSV columns? <b>not bold</b>', started_at: isoPlus(now - 3 * 3600000) };
    state.get('writer').state = 'afk';
    state.get('writer').last_error = { reason: 'budget_exhausted', detail: '120,400 of 120,000 tokens', at: w.end, event_id: null };
    void q;
    events.sort((a, b) => (a.id < b.id ? -1 : 1));
    // Config history.
    let parent = null;
    ['initial company', 'add the QA seat', 'raise the writer budget', 'move support under ceo'].forEach((summary, i) => {
      const id = uuid5(`rev:${i}`);
      revisions.push({
        revision_id: id, parent_revision_id: parent, created_at: isoPlus(now - (10 - i * 2) * 86400000), created_by: i ? 'api:ops' : 'cli',
        source: i ? 'api' : 'cli-import', summary, is_active: i === 3, activated_at: isoPlus(now - (10 - i * 2) * 86400000),
        revision_number: i + 1, parent_revision_number: i || null, company: COMPANY,
        payload: { name: COMPANY, token_budget: 2000000, units: UNITS.map((u) => u.name), seats: SEATS.slice(0, 5 + i).map((s) => ({ handle: s.handle, name: s.name, token_budget: s.cap || 0 })) },
      });
      parent = id;
    });
  }

  // Live turns: one chain per seat, so tasks queue.
  const chains = new Map();
  const wait = (ms) => new Promise((res) => {
    const t = setTimeout(() => { timers.delete(t); res(); }, ms * speed);
    timers.add(t);
  });
  let stopped = false;
  let loseCursor = false;

  async function liveTurn(handle, { summary, trace = hex(16), task = uuid7(), rootSpan = hex(8), created = true, source = 'api' }) {
    const seat = SEAT.get(handle);
    const rand = Math.random;
    const turnId = uuid7();
    const span = hex(8);
    const base = { seat: handle, task, trace };
    if (created) emit('task_created', { ...base, span: rootSpan, source, summary: `task for ${handle}: ${summary}`, payload: { text: summary, priority: 'normal' } });
    await wait(300);
    emit('task_started', { ...base, span, parent: rootSpan, summary: `${handle} started: ${summary}`, payload: { turn_id: turnId, trigger: { source, sender: null, channel: null, task_id: task, delegation_depth: 0, summary } } });
    const startedAt = new Date().toISOString();
    setSeat(handle, { state: 'working', last_error: null, task: { task_id: task, summary, trace_id: trace, started_at: startedAt }, turn: null });
    let input = 0; let output = 0;
    for (const phase of ['plan', 'execute', 'review']) {
      if (stopped) return;
      const ps = hex(8);
      const [model, provider] = MODELS[phase];
      emit('agent_phase_started', { ...base, span: ps, parent: span, summary: `${handle} ${phase} started`, payload: { phase, turn_id: turnId, iteration: 1, provider, model } });
      const tools = [];
      const steps = phase === 'execute' ? 10 : 6;
      let text = '';
      for (let i = 0; i < steps; i++) {
        if (stopped) return;
        await wait(450);
        text += (text ? ' ' : '') + words.slice(i * 3, i * 3 + 3).join(' ');
        if (phase === 'execute' && (i === 3 || i === 7)) tools.push({ name: i === 3 ? 'read_file' : 'run_tests', ok: true, duration_ms: Math.round(10 + rand() * 900) });
        const turn = { turn_id: turnId, phase, iteration: 1, model, response: text, tool_executions: [...tools], updated_at: new Date().toISOString() };
        emit('agent_turn_progress', { ...base, span: ps, parent: span, summary: `${handle} ${phase} …`, payload: { turn_id: turnId, phase, iteration: 1, role: seat.name, response: text, tool_executions: [...tools] } });
        setSeat(handle, { turn });
      }
      const p = phasePayload(rand, phase, turnId, 1, seat, summary, tools);
      p.response = text;
      input += p.input_tokens; output += p.output_tokens;
      emit('agent_phase_completed', { ...base, span: ps, parent: span, summary: `${handle} ${phase} ok`, payload: p });
    }
    await wait(300);
    emit('agent_turn_completed', { ...base, span, parent: rootSpan, summary: `${handle} turn done`, payload: { turn_id: turnId, decision: 'done', iterations: 1, models: ['gpt-4o-mini', 'claude-sonnet-4'], trigger: { source, sender: null, channel: null, task_id: task, delegation_depth: 0, summary }, input_tokens: input, output_tokens: output, cache_read_tokens: 0, total_tokens: input + output, duration_ms: Date.now() - Date.parse(startedAt) } });
    emit('task_completed', { ...base, span, parent: rootSpan, summary: `done: ${summary}`, payload: { turn_id: turnId, decision: 'done', final_artifact: 'A short report.' } });
    setSeat(handle, { state: 'idle', task: null, turn: null });
  }
  function queue(handle, job) {
    const next = (chains.get(handle) || Promise.resolve()).then(() => (stopped ? null : liveTurn(handle, job))).catch((e) => console.error(e));
    chains.set(handle, next);
    return next;
  }
  async function engLoop() {
    let i = 0;
    while (!stopped) {
      await queue('eng', { summary: TASKS[i++ % TASKS.length] });
      await wait(2500);
    }
  }

  // ---- reads -------------------------------------------------------------------

  function today() {
    const since = todayStart();
    const t = { since: iso(since), turns: 0, tasks_completed: 0, tasks_failed: 0, input_tokens: 0, output_tokens: 0, total_tokens: 0 };
    for (const ev of events) {
      if (Date.parse(ev.timestamp) < since) continue;
      if (ev.type === 'agent_turn_completed') {
        t.turns++; t.input_tokens += ev.payload.input_tokens; t.output_tokens += ev.payload.output_tokens; t.total_tokens += ev.payload.total_tokens;
      } else if (ev.type === 'task_completed') t.tasks_completed++;
      else if (ev.type === 'task_failed') t.tasks_failed++;
    }
    return t;
  }
  const KIND = { task_failed: 'task_failed', 'turn.guard_breach': 'guard_breach', budget_exhausted: 'budget_exhausted', llm_unavailable: 'llm_unavailable', mcp_server_failed: 'mcp_server_failed' };
  function attention() {
    const out = [];
    for (let i = events.length - 1; i >= 0 && out.length < 50; i--) {
      const ev = events[i];
      if (KIND[ev.type]) out.push({ kind: KIND[ev.type], handle: ev.tags?.agent_handle || null, summary: ev.summary, at: ev.timestamp, event_id: ev.id, trace_id: ev.trace_id });
    }
    for (const s of SEATS) {
      if (s.cap && ledger.get(s.handle) >= 0.8 * s.cap && ledger.get(s.handle) < s.cap) {
        out.unshift({ kind: 'budget_near', handle: s.handle, summary: `${s.handle} has used ${Math.round((ledger.get(s.handle) / s.cap) * 100)}% of its budget`, at: new Date().toISOString(), event_id: null, trace_id: null });
      }
    }
    return out.slice(0, 50);
  }
  function orgUsed() { let n = 0; for (const v of ledger.values()) n += v; return n; }
  function snapshot() {
    return {
      cursor: events.length ? events[events.length - 1].id : null,
      generated_at: new Date().toISOString(),
      company: COMPANY,
      health: { status: 'ok', version: '0.1.0-mock', engine: true, queue: 'memory', event_store: 'durable', clients: clients.size, started_at: new Date(started).toISOString() },
      seats: SEATS.map(seatView),
      events: events.slice(-100).reverse().map(row),
      attention: attention(),
      budget: { org: { used: orgUsed(), max: 2000000, refused_at: ledgerRefused } },
      today: today(),
    };
  }
  function agentView(s) {
    const st = state.get(s.handle);
    return {
      id: s.id, name: s.name, role: s.name, goal: `Be a good ${s.name.toLowerCase()}.`, handle: s.handle, token_budget: s.cap || 0, placement: {},
      kind: s.kind, unit_path: s.unit_path, manager: s.manager, reports: s.reports,
      state: st.state === 'working' ? 'working' : 'idle',
      current_task: st.task ? { task_id: st.task.task_id, summary: st.task.summary, started_at: st.task.started_at, trace_id: st.task.trace_id, phase: st.turn?.phase || null } : null,
    };
  }
  function breakdown(q) {
    let days = parseInt(q.get('since_days') ?? '7', 10);
    if (Number.isNaN(days)) days = 7;
    days = Math.min(30, Math.max(1, days));
    let recent = parseInt(q.get('recent_turns') ?? '50', 10);
    if (Number.isNaN(recent)) recent = 50;
    recent = Math.min(500, Math.max(1, recent));
    const role = q.get('agent_role') || '';
    const since = Date.now() - days * 86400000;
    const zero = () => ({ input_tokens: 0, output_tokens: 0, total_tokens: 0, calls: 0 });
    const add = (to, p) => { to.input_tokens += p.input_tokens; to.output_tokens += p.output_tokens; to.total_tokens += p.input_tokens + p.output_tokens; to.calls += p.calls ?? 1; return to; };
    const totals = zero(); const phases = new Map(); const models = new Map(); const workers = new Map(); const agents = new Map(); const turns = new Map();
    let through = '';
    for (const ev of events) {
      if (ev.type !== 'agent_phase_completed' || Date.parse(ev.timestamp) < since) continue;
      if (role && ev.agent_role !== role) continue;
      const p = ev.payload;
      through = ev.timestamp;
      add(totals, p);
      add(phases.get(p.phase) || phases.set(p.phase, { phase: p.phase, ...zero() }).get(p.phase), p);
      add(models.get(p.model) || models.set(p.model, { model: p.model, provider: p.provider, ...zero() }).get(p.model), p);
      if (p.auxiliary) add(workers.get(p.auxiliary) || workers.set(p.auxiliary, { worker: p.auxiliary, ...zero() }).get(p.auxiliary), p);
      const r = ev.agent_role || 'unknown';
      const a = agents.get(r) || agents.set(r, { role: r, handle: ev.tags?.agent_handle || '', agent_id: ev.agent_id || '', ...zero(), by_phase: {} }).get(r);
      add(a, p); add(a.by_phase[p.phase] || (a.by_phase[p.phase] = zero()), p);
      if (p.turn_id) {
        const t = turns.get(p.turn_id) || turns.set(p.turn_id, { turn_id: p.turn_id, role: r, handle: ev.tags?.agent_handle || '', agent_id: ev.agent_id || '', started_at: ev.timestamp, ended_at: ev.timestamp, ...zero(), by_phase: {} }).get(p.turn_id);
        t.ended_at = ev.timestamp;
        add(t, p); add(t.by_phase[p.phase] || (t.by_phase[p.phase] = zero()), p);
      }
    }
    const sorted = (m, k) => [...m.values()].sort((a, b) => b.total_tokens - a.total_tokens || String(a[k]).localeCompare(String(b[k])));
    return {
      since_days: days, agent_role: role, since: new Date(since).toISOString(), totals,
      by_phase: sorted(phases, 'phase'), by_model: sorted(models, 'model'), by_worker: sorted(workers, 'worker'), by_agent: sorted(agents, 'role'),
      by_turn: [...turns.values()].sort((a, b) => (a.ended_at < b.ended_at ? 1 : -1)).slice(0, recent),
      aggregated_through: through,
    };
  }
  function memory(s) {
    const now = Date.now();
    const at = (h) => new Date(now - h * 3600000).toISOString();
    return {
      agent_id: s.id, handle: s.handle,
      diary: { items: [
        { id: uuid5(`d1${s.handle}`), kind: 'diary_long', content: `The CTO wants tests before every merge. <b>not bold</b>`, ttl_until: null, created_at: at(50) },
        { id: uuid5(`d2${s.handle}`), kind: 'diary_short', content: 'CI is slow today; batch the test runs.', ttl_until: at(-20), created_at: at(3) },
      ], total: 2 },
      episodes: { items: [
        { id: uuid5(`e1${s.handle}`), task_id: uuid5('t1'), task_summary: 'Fix the flaky login test', plan_summary: 'reproduce, pin the clock, fix', tool_sequence: ['read_file', 'run_tests', 'write_file', 'run_tests'], skills_used: ['flaky-test-triage'], review_outcome: 'done', started_at: at(30), ended_at: at(29.8), duration_ms: 61000, kind: 'raw' },
        { id: uuid5(`e2${s.handle}`), task_id: null, task_summary: 'Weekly compaction of 12 episodes', plan_summary: '', tool_sequence: [], skills_used: [], review_outcome: null, started_at: at(100), ended_at: at(100), duration_ms: 0, kind: 'compacted' },
      ], raw: 1, compacted: 1 },
      skills: [{ id: uuid5(`s1${s.handle}`), name: 'flaky-test-triage', description: 'Find and pin the source of nondeterminism.', body: '# Flaky test triage\n\n1. Run it 20 times\n2. Pin time and randomness\n3. Fix the race', tool_sequence: ['run_tests', 'read_file'], state: 'active', version: 2, versions: 1, use_count: 4, last_used_at: at(29), created_at: at(300), updated_at: at(29) }],
      profiles: [{ subject: 'U123', platform: 'slack', display_name: 'Dana (founder)', summary: 'Prefers short answers with links.', traits: { tone: 'direct' }, interaction_count: 14, last_seen_at: at(5), created_at: at(400), updated_at: at(5) }],
      onboarding: { onboarded: true, chain_hash: hex(8), onboarded_at: at(500) },
    };
  }
  const TOOLS = [
    { name: 'read_file', description: 'Read a file of the workspace.', provider: 'builtin', input_schema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] }, annotations: { read_only: true, idempotent: true } },
    { name: 'write_file', description: 'Write a file of the workspace.', provider: 'builtin', input_schema: { type: 'object', properties: { path: { type: 'string' }, content: { type: 'string' } } }, annotations: { destructive: true } },
    { name: 'run_tests', description: 'Run the test suite.', provider: 'builtin', input_schema: { type: 'object' }, annotations: { open_world: false } },
    { name: 'lookup_colleague', description: 'Find who in the company knows about a topic.', provider: 'builtin', input_schema: { type: 'object', properties: { topic: { type: 'string' } } }, annotations: { read_only: true } },
    { name: 'github.create_issue', description: 'Open an issue on GitHub.', provider: 'github', input_schema: { type: 'object' }, annotations: { open_world: true } },
    { name: 'slack.post_message', description: 'Post to a Slack channel.', provider: 'slack', input_schema: { type: 'object' }, annotations: { open_world: true } },
  ];

  // ---- http ----------------------------------------------------------------------

  function send(res, status, body, headers = {}) {
    const text = body === undefined ? '' : JSON.stringify(body);
    res.writeHead(status, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store', ...headers });
    res.end(text);
  }
  const err = (res, status, error, reason, extra = {}) => send(res, status, { error, reason, ...extra });
  /** The token of a `crewlet.bearer.<hex>` socket subprotocol, as the server reads it. */
  function protocolToken(req) {
    const offered = String(req.headers['sec-websocket-protocol'] || '').split(',').map((p) => p.trim());
    const hex = offered.find((p) => p.startsWith('crewlet.bearer.'))?.slice('crewlet.bearer.'.length);
    return hex ? Buffer.from(hex, 'hex').toString('utf8') : null;
  }
  function authz(req, need) {
    const h = req.headers.authorization || '';
    const q = new URL(req.url, 'http://x').searchParams.get('token') || protocolToken(req);
    const given = h.startsWith('Bearer ') ? h.slice(7) : q;
    if (given && given !== token) return 'invalid token';
    if (need === 'read' && !readAuth) return null;
    if (!given) return need === 'read' ? 'reads need a bearer token' : 'this route needs a bearer token';
    return null;
  }
  async function body(req) {
    let data = '';
    for await (const chunk of req) { data += chunk; if (data.length > 1 << 20) break; }
    try { return JSON.parse(data || '{}'); } catch { return null; }
  }
  function serveAsset(res, rel, req) {
    const file = path.resolve(ASSETS, rel);
    if (!file.startsWith(ASSETS + path.sep) && file !== path.join(ASSETS, 'index.html')) return err(res, 404, 'not_found', 'no such asset');
    fs.readFile(file, (e, data) => {
      if (e) return err(res, 404, 'not_found', 'no such asset');
      const etag = `"mock-${started}"`;
      if (req.headers['if-none-match'] === etag) { res.writeHead(304); res.end(); return; }
      res.writeHead(200, {
        'Content-Type': MIME[path.extname(file)] || 'application/octet-stream', 'Cache-Control': 'no-cache', ETag: etag,
        // The strictest policy the page is meant to live under: nothing inline, nothing from elsewhere.
        'Content-Security-Policy': "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self' ws: wss:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        'X-Content-Type-Options': 'nosniff',
      });
      res.end(data);
    });
  }

  async function route(req, res) {
    const url = new URL(req.url, 'http://x');
    const p = url.pathname;
    const q = url.searchParams;
    const m = req.method;
    if ((m === 'GET' || m === 'HEAD') && (p === '/dashboard' || p === '/dashboard/')) return serveAsset(res, 'index.html', req);
    if ((m === 'GET' || m === 'HEAD') && p.startsWith('/dashboard/assets/')) return serveAsset(res, decodeURIComponent(p.slice('/dashboard/assets/'.length)), req);
    if (p === '/' ) { res.writeHead(302, { Location: '/dashboard' }); res.end(); return; }
    if (p === '/health') return send(res, 200, { status: 'ok' });
    if (p === '/ready') return send(res, 200, { ready: true, revision_id: revisions.find((r) => r.is_active)?.revision_id, embedded: true, draining: false, reason: null });

    const admin = p.startsWith('/config');
    const write = m !== 'GET';
    const denied = authz(req, admin || write ? 'admin' : 'read');
    if (denied) return err(res, 401, 'unauthorized', denied);

    let mm;
    if (m === 'GET' && p === '/stream/snapshot') return send(res, 200, snapshot());
    if (m === 'GET' && p === '/agents') return send(res, 200, SEATS.filter((s) => s.kind === 'agent').map(agentView));
    if ((mm = p.match(/^\/agents\/([^/]+)(\/memory|\/tasks)?$/))) {
      const key = decodeURIComponent(mm[1]);
      const s = SEAT.get(key) || SEATS.find((x) => x.id === key);
      if (!s || (s.kind === 'human' && mm[2] !== '/tasks')) return err(res, 404, 'not_found', 'Agent not found');
      if (m === 'GET' && !mm[2]) return send(res, 200, agentView(s));
      if (m === 'GET' && mm[2] === '/memory') {
        if (memoryOff) return err(res, 503, 'memory_not_configured', 'this API runs without a database: agent memory lives only in the engine process');
        return send(res, 200, memory(s));
      }
      if (m === 'POST' && mm[2] === '/tasks') {
        if (s.kind === 'human') return err(res, 400, 'bad_request', `${s.handle} is a human seat`);
        const b = await body(req);
        if (!b || typeof b.text !== 'string' || !b.text.trim()) return err(res, 400, 'bad_request', '`text` is required');
        if (b.priority && !['low', 'normal', 'high', 'urgent'].includes(b.priority)) return err(res, 400, 'bad_request', 'bad priority');
        const task = uuid7();
        const trace = hex(16);
        queue(s.handle, { summary: b.title || b.text.slice(0, 80), trace, task });
        return send(res, 202, { task_id: task, trace_id: trace, handle: s.handle });
      }
    }
    if (m === 'GET' && p === '/org') {
      const unit = (u, parent) => ({ name: u.name, kind: u.kind, path: [...parent, u.name], lead: u.lead, lead_inherited: !!u.lead_inherited,
        seats: SEATS.filter((s) => s.unit_path.join('/') === [...parent, u.name].join('/')).map((s) => s.handle),
        children: (u.children || []).map((c) => unit(c, [...parent, u.name])) });
      return send(res, 200, { company: COMPANY, revision_id: 4, roles: SEATS.filter((s) => !s.unit_path.length).map((s) => s.handle), units: UNITS.map((u) => unit(u, [])),
        seats: SEATS.map((s) => ({ id: s.id, handle: s.handle, name: s.name, kind: s.kind, unit_path: s.unit_path, manager: s.manager, manager_chain: s.manager ? [s.manager] : [], reports: s.reports })) });
    }
    if (m === 'GET' && p === '/tools') {
      const h = q.get('handle');
      return send(res, 200, { handle: h || null, live: true, tools: h ? TOOLS.filter((_, i) => (h.length + i) % 2 === 0 || i < 2) : TOOLS });
    }
    if (m === 'GET' && p === '/schedules') {
      const next = (hrs) => new Date(Math.ceil(Date.now() / 3600000) * 3600000 + hrs * 3600000).toISOString();
      return send(res, 200, [
        { scope: 'role:ceo', name: 'daily-standup', targets: ['ceo'], cron: '0 9 * * 1-5', timezone: 'Europe/Berlin', enabled: true, next_run: next(3) },
        { scope: 'unit:Engineering', name: 'triage-issues', targets: ['eng'], cron: '*/30 * * * *', timezone: 'UTC', enabled: true, next_run: next(0.5) },
        { scope: 'role:writer', name: 'weekly-newsletter', targets: ['writer'], cron: '0 14 * * 5', timezone: 'America/New_York', enabled: false, next_run: null },
      ]);
    }
    if (m === 'GET' && p === '/events') {
      const limit = q.has('limit') ? Number(q.get('limit')) : 50;
      if (!Number.isInteger(limit) || limit < 1 || limit > 500) return err(res, 400, 'bad_request', 'limit must be 1 to 500');
      let list = events.slice().reverse();
      const f = (k, fn) => { const v = q.get(k); if (v) list = list.filter((ev) => fn(ev, v)); };
      f('type', (ev, v) => ev.type === v); f('category', (ev, v) => ev.category === v);
      f('agent_id', (ev, v) => ev.agent_id === v); f('task_id', (ev, v) => ev.task_id === v);
      f('since', (ev, v) => ev.timestamp >= v); f('until', (ev, v) => ev.timestamp < v);
      const cursor = q.get('cursor');
      if (cursor) {
        const mc = cursor.match(/^-?\d{1,16}_([0-9a-f]{32})$/);
        if (!mc) return err(res, 400, 'bad_request', 'bad cursor');
        const after = mc[1];
        list = list.filter((ev) => ev.id.replace(/-/g, '') < after);
      }
      const page = list.slice(0, limit);
      const more = list.length > limit;
      const last = page[page.length - 1];
      return send(res, 200, { events: page, ...(more ? { next: `${Date.parse(last.timestamp) * 1000}_${last.id.replace(/-/g, '')}` } : {}) });
    }
    if (m === 'GET' && (mm = p.match(/^\/events\/trace\/([^/]+)$/))) {
      const id = mm[1];
      if (!/^[0-9a-f]{32}$/.test(id)) return err(res, 400, 'bad_request', 'a trace id is 32 lower-case hex digits');
      return send(res, 200, { trace_id: id, events: events.filter((ev) => ev.trace_id === id).slice(0, 500) });
    }
    if (m === 'GET' && (mm = p.match(/^\/events\/([^/]+)$/))) {
      const ev = byId.get(mm[1]);
      return ev ? send(res, 200, ev) : err(res, 404, 'not_found', 'no such event');
    }
    if (m === 'GET' && p === '/tokens/breakdown') return send(res, 200, breakdown(q));
    if (m === 'GET' && p === '/budgets') {
      const scope = (used, max) => ({ max_tokens: max, durable_used: used, durable_updated_at: new Date().toISOString(), live_used: null, live_max: null, refused_at: '' });
      const seats = SEATS.filter((s) => s.kind === 'agent').map((s) => ({ ...scope(ledger.get(s.handle), s.cap || 0), agent_id: s.id, role: s.name, handle: s.handle, ...(s.handle === 'writer' ? { refused_at: new Date(Date.now() - 20 * 3600000).toISOString() } : {}) }))
        .sort((a, b) => b.durable_used - a.durable_used);
      return send(res, 200, { durable: true, org: scope(orgUsed(), 2000000), seats, budgets: [], usage: seats.map((s) => ({ agent_handle: s.handle, tokens_used: s.durable_used, updated_at: new Date().toISOString() })) });
    }
    if (m === 'GET' && p === '/config') {
      const a = revisions.find((r) => r.is_active);
      return send(res, 200, a.payload, { ETag: `"${a.revision_id}"` });
    }
    if (m === 'GET' && p === '/config/revisions') {
      const limit = Math.min(500, Number(q.get('limit') || 50));
      return send(res, 200, revisions.slice().reverse().slice(0, limit).map(({ payload, ...r }) => r));
    }
    if ((mm = p.match(/^\/config\/revisions\/([^/]+)(\/diff|\/activate|\/revert)?$/))) {
      const key = decodeURIComponent(mm[1]);
      const rev = revisions.find((r) => r.revision_id === key || String(r.revision_number) === key);
      if (!rev) return err(res, 404, 'not_found', 'no such revision');
      const active = revisions.find((r) => r.is_active);
      if (m === 'GET' && !mm[2]) return send(res, 200, rev);
      if (m === 'GET' && mm[2] === '/diff') {
        const changes = [];
        const a = active.payload; const b = rev.payload;
        for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
          if (JSON.stringify(a[k]) === JSON.stringify(b[k])) continue;
          changes.push(!(k in a) ? { op: 'add', path: `/${k}`, new: b[k] } : !(k in b) ? { op: 'remove', path: `/${k}`, old: a[k] } : { op: 'replace', path: `/${k}`, old: a[k], new: b[k] });
        }
        return send(res, 200, { from: active.revision_id, to: rev.revision_id, changes });
      }
      if (m === 'POST') {
        const summary = req.headers['x-summary'] || `revert to ${rev.revision_id}`;
        for (const r of revisions) r.is_active = false;
        const fresh = { ...rev, revision_id: uuid7(), parent_revision_id: active.revision_id, parent_revision_number: active.revision_number, revision_number: revisions.length + 1, created_at: isoPlus(Date.now()), activated_at: isoPlus(Date.now()), created_by: 'api:ops', source: 'api.revert', summary, is_active: true };
        revisions.push(fresh);
        emit('config_revision_activated', { summary: `revision ${fresh.revision_number} active: ${summary}`, payload: { revision_id: fresh.revision_id } });
        const { payload, ...rec } = fresh;
        return send(res, mm[2] === '/activate' ? 200 : 201, rec);
      }
    }
    if (m === 'GET' && p === '/openapi.json') return send(res, 200, { openapi: '3.1.0' });
    return err(res, 404, 'not_found', `no route ${m} ${p}`);
  }

  // ---- websocket -------------------------------------------------------------------

  function frame(opcode, payload) {
    const data = Buffer.isBuffer(payload) ? payload : Buffer.from(payload);
    const n = data.length;
    const head = n < 126 ? Buffer.from([0x80 | opcode, n]) : n < 65536
      ? Buffer.from([0x80 | opcode, 126, n >> 8, n & 255])
      : (() => { const b = Buffer.alloc(10); b[0] = 0x80 | opcode; b[1] = 127; b.writeBigUInt64BE(BigInt(n), 2); return b; })();
    return Buffer.concat([head, data]);
  }
  function sendFrame(c, obj) {
    if (c.closed) return;
    c.socket.write(frame(1, JSON.stringify(obj)));
  }
  function broadcast(obj) { for (const c of clients) sendFrame(c, obj); }
  function closeClient(c, code, reason) {
    if (c.closed) return;
    const b = Buffer.alloc(2); b.writeUInt16BE(code);
    c.socket.write(frame(8, Buffer.concat([b, Buffer.from(reason || '')])));
    c.closed = true;
    clients.delete(c);
    c.socket.end();
  }
  let lastSocketToken = null;
  function onUpgrade(req, socket) {
    const url = new URL(req.url, 'http://x');
    const reject = (status, text) => { socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`); };
    if (url.pathname !== '/ws/stream' || noWs) return reject(404, 'Not Found');
    if (authz(req, 'read')) return reject(401, 'Unauthorized');
    const key = req.headers['sec-websocket-key'];
    if (!key) return reject(400, 'Bad Request');
    const accept = crypto.createHash('sha1').update(key + WS_GUID).digest('base64');
    // As the server: select `crewlet.v1` when offered, never the token's.
    const offered = String(req.headers['sec-websocket-protocol'] || '').split(',').map((p) => p.trim());
    const proto = offered.includes('crewlet.v1') ? 'Sec-WebSocket-Protocol: crewlet.v1\r\n' : '';
    lastSocketToken = protocolToken(req);
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n${proto}\r\n`);
    socket.setNoDelay(true);
    const c = { socket, closed: false, buf: Buffer.alloc(0) };
    socket.on('data', (chunk) => {
      c.buf = Buffer.concat([c.buf, chunk]);
      while (c.buf.length >= 2) {
        const op = c.buf[0] & 0x0f;
        let len = c.buf[1] & 0x7f;
        let off = 2;
        if (len === 126) { if (c.buf.length < 4) return; len = c.buf.readUInt16BE(2); off = 4; } else if (len === 127) { if (c.buf.length < 10) return; len = Number(c.buf.readBigUInt64BE(2)); off = 10; }
        const masked = c.buf[1] & 0x80;
        const need = off + (masked ? 4 : 0) + len;
        if (c.buf.length < need) return;
        const mask = masked ? c.buf.subarray(off, off + 4) : null;
        const data = Buffer.from(c.buf.subarray(off + (masked ? 4 : 0), need));
        if (mask) for (let i = 0; i < data.length; i++) data[i] ^= mask[i & 3];
        c.buf = c.buf.subarray(need);
        if (op === 8) { closeClient(c, 1000, ''); return; }
        if (op === 9) socket.write(frame(10, data));
        if (op === 1) {
          try { if (JSON.parse(data.toString()).kind === 'ping') sendFrame(c, { kind: 'pong', data: null }); } catch { /* ignore */ }
        }
      }
    });
    socket.on('close', () => { c.closed = true; clients.delete(c); });
    socket.on('error', () => { c.closed = true; clients.delete(c); });
    sendFrame(c, { kind: 'snapshot', data: snapshot() });
    const after = url.searchParams.get('after');
    if (after) {
      const i = loseCursor ? -1 : events.findIndex((ev) => ev.id === after);
      loseCursor = false;
      const replay = i < 0 ? [] : events.slice(i + 1);
      for (const ev of replay) sendFrame(c, { kind: 'event', data: { ...ev, failed: failed(ev) } });
      sendFrame(c, { kind: 'resumed', data: { after, replayed: replay.length, complete: i >= 0 } });
    }
    clients.add(c);
  }

  history();
  const server = http.createServer((req, res) => {
    route(req, res).catch((e) => { console.error(e); if (!res.headersSent) err(res, 500, 'internal', String(e)); });
  });
  server.on('upgrade', onUpgrade);
  const beat = setInterval(() => broadcast({ kind: 'heartbeat', data: { at: new Date().toISOString(), clients: clients.size } }), 15000);

  return {
    server, token,
    /** The token the newest socket carried as its subprotocol (null: none). */
    get socketToken() { return lastSocketToken; },
    set socketToken(v) { lastSocketToken = v; },
    async listen(port = 0, host = '127.0.0.1') {
      await new Promise((res) => server.listen(port, host, res));
      const addr = server.address();
      engLoop();
      return `http://${host}:${addr.port}`;
    },
    /** Test hook: the next resume answers `complete: false` (the cursor is too old). */
    loseCursor() { loseCursor = true; },
    /** Test hook: drop every socket with a close code (e.g. 4008). */
    kick(code = 4008, reason = 'too slow: mock') { for (const c of [...clients]) closeClient(c, code, reason); },
    async close() {
      stopped = true;
      clearInterval(beat);
      for (const t of timers) clearTimeout(t);
      for (const c of [...clients]) closeClient(c, 1001, 'stopping');
      server.closeAllConnections?.();
      await new Promise((res) => server.close(res));
    },
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] || '').href) {
  const mock = createMock();
  const url = await mock.listen(Number(process.env.PORT || 8787), process.env.HOST || '127.0.0.1');
  console.log(`mock crewlet API on ${url}/dashboard (token: ${mock.token})`);
  const stop = () => mock.close().then(() => process.exit(0));
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}
