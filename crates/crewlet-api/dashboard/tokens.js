// Tokens: /tokens/breakdown over 1..30 days, by phase, model, auxiliary
// worker, agent and turn.

import { api, qs } from './api.js';
import { hbars, vbars } from './chart.js';
import { h, room, replace, loaded, num, when, section, empty, table, agentLink, errorBox, short } from './ui.js';

const DAYS = [1, 3, 7, 14, 30];

function share(n, total) {
  return total ? `${((n / total) * 100).toFixed(1)}%` : '–';
}

function rollup(title, rows, key, total, extra) {
  if (!rows.length) return section(title, empty('Nothing in this window.'));
  const chartRows = rows.map((r) => ({ ...r, label: r[key] || 'unknown' }));
  return section(title,
    h('div', { class: 'chart-box' }, hbars(chartRows.slice(0, 15), title)),
    table([key === 'role' ? 'Agent' : key[0].toUpperCase() + key.slice(1), ...(extra ? [extra.head] : []), 'Calls', 'Input', 'Output', 'Total', 'Share'],
      chartRows.map((r) => h('tr', { 'data-row': r.label, 'data-total': r.total_tokens },
        h('td', {}, key === 'role' && r.handle ? [agentLink(r.handle), h('div', { class: 'muted small' }, r.role)] : r.label),
        extra ? h('td', {}, extra.cell(r)) : null,
        h('td', { class: 'num' }, num(r.calls)),
        h('td', { class: 'num' }, num(r.input_tokens)),
        h('td', { class: 'num' }, num(r.output_tokens)),
        h('td', { class: 'num' }, num(r.total_tokens)),
        h('td', { class: 'num' }, share(r.total_tokens, total)))),
      { 'data-rollup': key }));
}

const phaseSplit = (m) => Object.entries(m || {}).map(([p, t]) => `${p} ${num(t.total_tokens)}`).join(' · ');

export function tokens(ctx) {
  let days = parseInt(ctx.query.get('days') || '7', 10);
  if (!(days >= 1 && days <= 30)) days = 7;
  const role = ctx.query.get('role') || '';
  const select = h('select', { id: 'days', name: 'days', 'data-testid': 'days' },
    [...new Set([...DAYS, days])].sort((a, b) => a - b).map((d) => h('option', { value: d, selected: d === days }, d === 1 ? 'last day' : `last ${d} days`)));
  select.addEventListener('change', () => ctx.go(`#/tokens${qs({ days: select.value, role })}`));
  const body = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const root = room('tokens', 'Tokens',
    h('div', { class: 'row toolbar' }, h('label', { for: 'days' }, 'Window'), select,
      role ? h('span', { class: 'chip' }, `agent role: ${role} `, h('a', { href: `#/tokens${qs({ days })}` }, 'all roles')) : null),
    body);
  root.dataset.sinceDays = days;

  api(`/tokens/breakdown${qs({ since_days: days, agent_role: role, recent_turns: 100 })}`, { signal: ctx.signal }).then((b) => {
    const t = b.totals || {};
    const total = Number(t.total_tokens) || 0;
    const turns = b.by_turn || [];
    replace(body,
      h('dl', { class: 'totals', 'data-testid': 'token-totals', 'data-since-days': b.since_days },
        h('div', {}, h('dt', {}, 'Total tokens'), h('dd', { 'data-total-tokens': t.total_tokens ?? 0 }, num(t.total_tokens ?? 0))),
        h('div', {}, h('dt', {}, 'Input'), h('dd', { 'data-input-tokens': t.input_tokens ?? 0 }, num(t.input_tokens ?? 0))),
        h('div', {}, h('dt', {}, 'Output'), h('dd', { 'data-output-tokens': t.output_tokens ?? 0 }, num(t.output_tokens ?? 0))),
        h('div', {}, h('dt', {}, 'LLM calls'), h('dd', { 'data-calls': t.calls ?? 0 }, num(t.calls ?? 0)))),
      h('p', { class: 'muted small' }, `Since ${b.since ? `${String(b.since).slice(0, 16).replace('T', ' ')} UTC` : `${b.since_days} days ago`}; counted through `,
        b.aggregated_through ? when(b.aggregated_through) : 'nothing yet', '. ',
        h('span', { class: 'legend' }, h('span', { class: 'sw in' }), 'input ', h('span', { class: 'sw out' }), 'output')),
      h('div', { class: 'grid2' },
        rollup('By phase', b.by_phase || [], 'phase', total),
        rollup('By model', b.by_model || [], 'model', total, { head: 'Provider', cell: (r) => r.provider || '–' })),
      rollup('By agent', b.by_agent || [], 'role', total, { head: 'By phase', cell: (r) => phaseSplit(r.by_phase) }),
      rollup('Auxiliary workers', b.by_worker || [], 'worker', total),
      section(`Recent turns (${turns.length})`,
        turns.length ? [
          h('div', { class: 'chart-box' }, vbars([...turns].reverse().map((x) => ({ label: `${x.handle || x.role} ${short(x.turn_id)}`, value: Number(x.total_tokens) || 0 })), 'Tokens per turn, oldest first')),
          table(['Ended', 'Agent', 'Turn', 'By phase', 'Calls', 'Total'], turns.map((x) => h('tr', { 'data-turn': x.turn_id },
            h('td', {}, when(x.ended_at)),
            h('td', {}, x.handle ? agentLink(x.handle) : x.role),
            h('td', { class: 'mono small' }, short(x.turn_id)),
            h('td', { class: 'small' }, phaseSplit(x.by_phase)),
            h('td', { class: 'num' }, num(x.calls)),
            h('td', { class: 'num' }, num(x.total_tokens))))),
        ] : empty('No turns in this window.')));
  }).catch((err) => { if (ctx.alive()) replace(body, errorBox(err)); })
    .finally(() => { if (ctx.alive()) loaded(root); });
  return root;
}
