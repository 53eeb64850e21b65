// HTTP with the bearer token. The token lives only in sessionStorage (this
// tab, until it closes) and is asked for when the server wants it: a write,
// a read answered 401, or the reader's wish to see content the server hid
// (prompts and responses need a token with `read:content`).

import { h } from './ui.js';

const KEY = 'crewlet.token';
const listeners = new Set();

export const auth = {
  /** Set once a read was answered 401. */
  readsNeedToken: false,
  get token() {
    try { return sessionStorage.getItem(KEY) || null; } catch { return null; }
  },
  set(token) {
    try { sessionStorage.setItem(KEY, token); } catch { /* storage off: nothing kept */ }
    listeners.forEach((fn) => fn());
  },
  forget() {
    try { sessionStorage.removeItem(KEY); } catch { /* ignore */ }
    listeners.forEach((fn) => fn());
  },
  onChange(fn) { listeners.add(fn); return () => listeners.delete(fn); },
};

/**
 * Whether the server left content out of what this tab reads (prompts,
 * responses, memory, task text): it does for a reader without a token with
 * `read:content`, and says so with `x-crewlet-content: hidden` and the
 * snapshot's `content_hidden`.
 */
const contentListeners = new Set();
export const content = {
  hidden: false,
  set(hidden) {
    if (this.hidden === !!hidden) return;
    this.hidden = !!hidden;
    contentListeners.forEach((fn) => fn());
  },
  onChange(fn) { contentListeners.add(fn); return () => contentListeners.delete(fn); },
};

/** What to show where a prompt or response is absent. */
export function notShown() {
  return content.hidden ? '(hidden: paste a token with read:content)' : '(not recorded)';
}

/** Where the local operator token is, when this page is served on loopback. */
export function localTokenPath() {
  if (!LOOPBACK.test(location.hostname)) return null;
  return `~/.crewlet/run/api-${location.port || (location.protocol === 'https:' ? 443 : 80)}.token`;
}

export class HttpError extends Error {
  constructor(status, body) {
    super(body?.reason || body?.error || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

export class AuthCancelled extends Error {
  constructor() { super('a token is needed and none was given'); this.status = 401; this.body = { error: 'unauthorized', reason: this.message }; }
}

let pending = null;
const LOOPBACK = /^(localhost|127(\.\d+){3}|\[::1\])$/;

/** Opens the token dialog (one at a time); resolves once a token is set. */
export function askToken(why) {
  if (pending) return pending;
  pending = new Promise((resolve, reject) => {
    const input = h('input', { type: 'password', id: 'token-input', name: 'token', autocomplete: 'off', required: true, 'data-testid': 'token-input' });
    const dialog = h('dialog', { class: 'token-dialog', 'aria-labelledby': 'token-title', 'data-testid': 'token-dialog' },
      h('form', { method: 'dialog' },
        h('h2', { id: 'token-title' }, 'API token'),
        h('p', {}, why || 'This needs a bearer token.'),
        h('label', { for: 'token-input' }, 'Token'), input,
        localTokenPath() ? h('p', { class: 'muted small' }, 'Running locally without configured tokens? The API wrote one to ',
          h('code', {}, localTokenPath()), '.') : null,
        h('p', { class: 'muted small' }, 'Kept only in this tab (sessionStorage) until you forget it or close the tab.'),
        h('div', { class: 'row end' },
          h('button', { type: 'submit', value: 'cancel', class: 'ghost', formnovalidate: true }, 'Cancel'),
          h('button', { type: 'submit', value: 'ok', 'data-testid': 'token-submit' }, 'Use token'))));
    dialog.addEventListener('close', () => {
      const ok = dialog.returnValue === 'ok' && input.value.trim();
      dialog.remove();
      pending = null;
      if (ok) { auth.set(input.value.trim()); resolve(); } else reject(new AuthCancelled());
    });
    document.body.append(dialog);
    dialog.showModal();
    input.focus();
  });
  return pending;
}

async function parse(res) {
  const text = await res.text();
  if (!text) return null;
  try { return JSON.parse(text); } catch { return { error: 'not_json', reason: text.slice(0, 300) }; }
}

/**
 * JSON request. `write` asks for the token first when none is held; a 401
 * asks for one (again, when the held one was refused) and retries once.
 * `admin` marks routes that always need a token (/config), so their 401
 * does not mean reads are closed.
 */
export async function api(path, { method = 'GET', body, headers = {}, signal, write = false, admin = false } = {}) {
  if (write && !auth.token) await askToken(`${method} ${path} needs a token.`);
  for (let attempt = 0; ; attempt++) {
    const hd = { Accept: 'application/json', ...headers };
    const token = auth.token;
    if (token) hd.Authorization = `Bearer ${token}`;
    if (body !== undefined) hd['Content-Type'] = 'application/json';
    const res = await fetch(path, {
      method, headers: hd, signal, cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (res.status === 401 && attempt === 0) {
      if (!write && !admin) auth.readsNeedToken = true;
      const data = await parse(res);
      if (token) auth.forget();
      await askToken(token ? `The server refused the token (${data?.reason || 'unauthorized'}). Enter another.`
        : `${path.split('?')[0]} needs a token${data?.reason ? `: ${data.reason}` : '.'}`);
      continue;
    }
    const data = await parse(res);
    if (!res.ok) throw new HttpError(res.status, data);
    const shown = res.headers.get('x-crewlet-content');
    if (shown) content.set(shown === 'hidden');
    return data;
  }
}

/** Query string from an object, skipping empty values. */
export function qs(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : '';
}
