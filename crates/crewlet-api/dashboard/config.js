// Config: the revision history, one revision's diff against the active one,
// and activate / revert. Every /config route needs an admin token.

import { api, qs, askToken, AuthCancelled } from './api.js';
import { h, room, replace, loaded, when, section, empty, table, dl, json, errorBox, short } from './ui.js';

function problems(err) {
  const list = err?.body?.problems;
  if (!Array.isArray(list) || !list.length) return null;
  return h('ul', { class: 'problems' }, list.map((p) => h('li', {}, h('span', { class: 'mono' }, p.path || ''), ' ', p.message || JSON.stringify(p))));
}

function failure(ctx, err, body) {
  if (err instanceof AuthCancelled) {
    replace(body, h('div', { class: 'warn-box' }, h('p', {}, 'The configuration needs a token with the admin scope.'),
      h('button', { type: 'button', onclick: () => askToken('The configuration needs an admin token.').then(() => ctx.go(location.hash, { replace: true, force: true })).catch(() => {}) }, 'Enter token')));
  } else replace(body, errorBox(err, problems(err)));
}

/** Line diff (LCS) of two pretty-printed values, with 2 lines of context. */
function lineDiff(a, b) {
  const x = JSON.stringify(a, null, 2).split('\n');
  const y = JSON.stringify(b, null, 2).split('\n');
  if (x.length * y.length > 250000) return null;
  const n = x.length, m = y.length;
  const L = Array.from({ length: n + 1 }, () => new Uint16Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const ops = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && x[i] === y[j]) { ops.push([' ', x[i]]); i++; j++; }
    else if (j < m && (i === n || L[i][j + 1] >= L[i + 1][j])) { ops.push(['+', y[j]]); j++; }
    else { ops.push(['-', x[i]]); i++; }
  }
  const keep = ops.map((o, k) => o[0] !== ' ' || ops.slice(Math.max(0, k - 2), k + 3).some((p) => p[0] !== ' '));
  const out = [];
  ops.forEach((o, k) => {
    if (keep[k]) out.push(h('span', { class: o[0] === '+' ? 'add' : o[0] === '-' ? 'del' : null }, `${o[0]} ${o[1]}`));
    else if (keep[k - 1]) out.push(h('span', { class: 'gap' }, '  …'));
  });
  return h('div', { class: 'linediff', tabindex: '0', role: 'group', 'aria-label': 'changed lines' }, out);
}

const short64 = (v) => {
  if (v === undefined) return h('span', { class: 'muted' }, '–');
  const text = JSON.stringify(v);
  return h('code', { class: 'wrap' }, text.length > 300 ? text.slice(0, 300) + '…' : text);
};

export function config(ctx) {
  return ctx.params[0] ? revision(ctx) : revisions(ctx);
}

function revisions(ctx) {
  const body = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const root = room('config', 'Config', body);
  api(`/config/revisions${qs({ limit: 50 })}`, { signal: ctx.signal, admin: true }).then((list) => {
    const active = (list || []).find((r) => r.is_active);
    replace(body,
      active ? h('p', { class: 'big' }, `Active: revision ${active.revision_number} — ${active.summary || 'no summary'} `, h('span', { class: 'muted small' }, '(', when(active.activated_at || active.created_at), ')'))
        : h('p', { class: 'warn-box' }, 'No revision is active.'),
      list?.length ? table(['#', 'Summary', 'Source', 'By', 'Created', ''], list.map((r) => h('tr', { 'data-revision': r.revision_id, class: r.is_active ? 'active' : null },
        h('td', { class: 'num' }, h('a', { href: `#/config/${encodeURIComponent(r.revision_id)}` }, String(r.revision_number))),
        h('td', { class: 'wrap' }, h('a', { href: `#/config/${encodeURIComponent(r.revision_id)}` }, r.summary || '(no summary)')),
        h('td', {}, r.source), h('td', {}, r.created_by), h('td', {}, when(r.created_at)),
        h('td', {}, r.is_active ? h('span', { class: 'tag good' }, 'active') : null))), { 'data-testid': 'revisions' })
        : empty('No revisions yet.'));
  }).catch((err) => { if (ctx.alive()) failure(ctx, err, body); })
    .finally(() => { if (ctx.alive()) loaded(root); });
  return root;
}

function revision(ctx) {
  const id = ctx.params[0];
  const body = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const result = h('div', { 'aria-live': 'polite', 'data-testid': 'config-result' });
  const root = room('config-revision', `Revision ${short(id, 8)}`, h('p', {}, h('a', { href: '#/config' }, '← All revisions')), result, body);
  root.dataset.revision = id;

  const act = async (verb, summary) => {
    if (!window.confirm(`${verb === 'activate' ? 'Activate' : 'Revert to'} this revision? The engine reloads the company.`)) return;
    replace(result, h('p', { class: 'muted' }, 'Working…'));
    try {
      const headers = summary ? { 'X-Summary': summary } : {};
      const rec = await api(`/config/revisions/${encodeURIComponent(id)}/${verb}`, { method: 'POST', write: true, admin: true, headers });
      replace(result, h('p', { class: 'good' }, `Revision ${rec.revision_number} is active.`));
      if (rec.revision_id && rec.revision_id !== id) ctx.go(`#/config/${encodeURIComponent(rec.revision_id)}`);
      else ctx.go(location.hash, { replace: true, force: true });
    } catch (err) {
      replace(result, err instanceof AuthCancelled ? h('p', { class: 'error' }, 'No token given: nothing changed.') : errorBox(err, problems(err)));
    }
  };

  Promise.all([
    api(`/config/revisions/${encodeURIComponent(id)}`, { signal: ctx.signal, admin: true }),
    api(`/config/revisions/${encodeURIComponent(id)}/diff`, { signal: ctx.signal, admin: true }).catch((err) => ({ error: err })),
  ]).then(([rec, diff]) => {
    root.querySelector('h1').textContent = `Revision ${rec.revision_number}`;
    document.title = `Revision ${rec.revision_number} · Crewlet`;
    const summary = h('input', { id: 'rev-summary', autocomplete: 'off', placeholder: `revert to ${rec.revision_number}` });
    const changes = diff.error ? null : diff.changes || [];
    replace(body,
      dl([
        ['Summary', rec.summary],
        ['State', rec.is_active ? h('span', { class: 'tag good' }, 'active') : 'inactive'],
        ['Company', rec.company],
        ['Source', rec.source], ['By', rec.created_by], ['Created', [rec.created_at, ' (', when(rec.created_at), ')']],
        ['Parent', rec.parent_revision_id ? h('a', { href: `#/config/${encodeURIComponent(rec.parent_revision_id)}` }, `revision ${rec.parent_revision_number ?? short(rec.parent_revision_id)}`) : 'none'],
        ['Id', h('span', { class: 'mono' }, rec.revision_id)],
      ]),
      rec.is_active ? null : h('div', { class: 'panel actions' },
        h('label', { for: 'rev-summary' }, 'Summary for the change (optional)'), summary,
        h('div', { class: 'row' },
          h('button', { type: 'button', 'data-testid': 'activate', onclick: () => act('activate', summary.value.trim()) }, 'Activate'),
          h('button', { type: 'button', class: 'ghost', 'data-testid': 'revert', onclick: () => act('revert', summary.value.trim()) }, 'Revert to it (new revision)'))),
      section(rec.is_active ? 'Diff (this is the active revision)' : 'Diff against the active revision',
        diff.error ? errorBox(diff.error) : changes.length ? table(['Op', 'Path', 'Active → this revision'], changes.map((c) => {
          const nested = c.op === 'replace' && c.old && c.new && typeof c.old === 'object' && typeof c.new === 'object';
          return h('tr', { class: `op-${c.op}` },
            h('td', {}, h('span', { class: `tag ${c.op === 'remove' ? 'bad' : c.op === 'add' ? 'good' : ''}` }, c.op)),
            h('td', { class: 'mono' }, c.path),
            h('td', {}, (nested && lineDiff(c.old, c.new)) || [c.op !== 'add' ? h('div', { class: 'del' }, '− ', short64(c.old)) : null,
              c.op !== 'remove' ? h('div', { class: 'add' }, '+ ', short64(c.new)) : null]));
        }), { 'data-testid': 'diff' })
          : empty('No differences.')),
      h('details', {}, h('summary', {}, 'The company in this revision (JSON)'), json(rec.payload)));
  }).catch((err) => { if (ctx.alive()) failure(ctx, err, body); })
    .finally(() => { if (ctx.alive()) loaded(root); });
  return root;
}
