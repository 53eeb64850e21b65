// Schedules, tools and budgets: one read each.

import { api, qs } from './api.js';
import { store } from './live.js';
import { h, room, replace, loaded, num, when, section, empty, table, bar, agentLink, errorBox } from './ui.js';

function simple(ctx, name, title, path, render, intro) {
  const body = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const root = room(name, title, intro || null, body);
  api(path, { signal: ctx.signal }).then((data) => replace(body, render(data)))
    .catch((err) => { if (ctx.alive()) replace(body, errorBox(err)); })
    .finally(() => { if (ctx.alive()) loaded(root); });
  return root;
}

export function schedules(ctx) {
  return simple(ctx, 'schedules', 'Schedules', '/schedules', (list) => (list?.length
    ? table(['Name', 'Seat', 'Cron', 'Time zone', 'Enabled', 'Next run'], list.map((s) => h('tr', { 'data-schedule': s.name, class: s.enabled ? null : 'muted' },
      h('td', {}, s.name), h('td', {}, (s.targets || (s.handle ? [s.handle] : [])).flatMap((t, i) => (i ? [', ', agentLink(t)] : [agentLink(t)]))), h('td', { class: 'mono' }, s.cron), h('td', {}, s.timezone || 'UTC'),
      h('td', {}, s.enabled ? 'yes' : 'no'),
      h('td', {}, s.next_run ? [h('span', { class: 'mono small' }, s.next_run), ' (', when(s.next_run), ')'] : '–'))))
    : empty('No schedules configured.')));
}

function annotations(a) {
  if (!a) return null;
  return Object.entries(a).filter(([, v]) => v).map(([k]) => h('span', { class: `chip ${k === 'destructive' ? 'bad' : ''}` }, k.replace('_', ' ')));
}

export function tools(ctx) {
  const handle = ctx.query.get('handle') || '';
  const seats = store.seatList().filter((s) => s.kind !== 'human').map((s) => s.handle);
  if (handle && !seats.includes(handle)) seats.push(handle);
  const select = h('select', { id: 'tool-seat' }, h('option', { value: '' }, 'every seat'),
    seats.map((s) => h('option', { value: s, selected: s === handle }, s)));
  select.addEventListener('change', () => ctx.go(`#/tools${qs({ handle: select.value })}`));
  return simple(ctx, 'tools', 'Tools', `/tools${qs({ handle })}`, (r) => {
    const list = r?.tools || [];
    const byProvider = {};
    for (const t of list) byProvider[t.provider] = (byProvider[t.provider] || 0) + 1;
    return [
      r && r.live === false ? h('p', { class: 'warn-box' }, 'This API runs outside the engine: it cannot list live tools.') : null,
      h('p', { class: 'summary' }, `${list.length} tools: `, Object.entries(byProvider).map(([p, n]) => h('span', { class: 'chip' }, `${p} ${n}`))),
      list.length ? table(['Tool', 'Provider', 'What it does', 'Hints'], list.map((t) => h('tr', { 'data-tool': t.name },
        h('td', { class: 'mono' }, t.name), h('td', {}, t.provider), h('td', { class: 'wrap' }, t.description,
          h('details', {}, h('summary', { class: 'small' }, 'arguments'), h('pre', { class: 'json' }, JSON.stringify(t.input_schema ?? {}, null, 2)))),
        h('td', {}, annotations(t.annotations)))))
        : h('p', { class: 'empty' }, 'No tools.'),
    ];
  }, h('div', { class: 'row toolbar' }, h('label', { for: 'tool-seat' }, 'Seat'), select));
}

function scope(title, b, label) {
  const exhausted = !!b.refused_at;
  return h('div', { class: 'budget-row', 'data-budget': label },
    h('div', { class: 'row wrap-row' }, title,
      exhausted ? h('span', { class: 'tag bad' }, 'refusing since ', when(b.refused_at)) : null,
      b.durable_updated_at ? h('span', { class: 'muted small' }, 'moved ', when(b.durable_updated_at)) : null),
    bar(b.durable_used, b.max_tokens, `${label} budget`));
}

export function budgets(ctx) {
  return simple(ctx, 'budgets', 'Budgets', '/budgets', (b) => [
    b.durable === false ? h('p', { class: 'warn-box' }, 'The ledger could not be read: these zeros are unknown, not nothing spent.') : null,
    section('Company', scope(h('strong', {}, store.company || 'Org'), b.org || {}, 'org')),
    section('Seats', b.seats?.length ? b.seats.map((s) => scope(h('span', {}, agentLink(s.handle), ' ', h('span', { class: 'muted' }, s.role)), s, s.handle))
      : empty('No agent seats.')),
    b.usage?.length ? section('Lifetime use', table(['Seat', 'Tokens', 'Last moved'], b.usage.map((u) => h('tr', { 'data-usage': u.agent_handle },
      h('td', {}, agentLink(u.agent_handle)), h('td', { class: 'num' }, num(u.tokens_used)), h('td', {}, when(u.updated_at)))))) : null,
  ]);
}
