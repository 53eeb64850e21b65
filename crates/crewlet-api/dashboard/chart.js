// Hand-drawn SVG charts.

import { s, compact, num } from './ui.js';

const clip = (t, n) => (t.length > n ? t.slice(0, n - 1) + '…' : t);

/**
 * Horizontal stacked bars, input then output: rows are
 * {label, input_tokens, output_tokens, total_tokens}.
 */
export function hbars(rows, title) {
  const W = 640, LABEL = 170, VALUE = 70, ROW = 24, BAR = 14;
  const max = Math.max(1, ...rows.map((r) => Number(r.total_tokens) || 0));
  const area = W - LABEL - VALUE;
  const H = rows.length * ROW + 8;
  return s('svg', {
    class: 'chart', viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img',
    'aria-label': `${title}: ${rows.map((r) => `${r.label} ${num(r.total_tokens)}`).join(', ')}`,
  },
  rows.map((r, i) => {
    const y = i * ROW + 4;
    const wi = ((Number(r.input_tokens) || 0) / max) * area;
    const wo = ((Number(r.output_tokens) || 0) / max) * area;
    return s('g', { transform: `translate(0 ${y})` },
      s('text', { x: LABEL - 8, y: BAR - 2, 'text-anchor': 'end', class: 'chart-label' }, clip(String(r.label), 24)),
      s('rect', { x: LABEL, y: 0, width: Math.max(wi, 0), height: BAR, class: 'bar-in', rx: 2 },
        s('title', {}, `${r.label}: ${num(r.input_tokens)} input tokens`)),
      s('rect', { x: LABEL + wi, y: 0, width: Math.max(wo, 0), height: BAR, class: 'bar-out', rx: 2 },
        s('title', {}, `${r.label}: ${num(r.output_tokens)} output tokens`)),
      s('text', { x: LABEL + wi + wo + 6, y: BAR - 2, class: 'chart-value' }, compact(r.total_tokens)));
  }));
}

/** Vertical bars of one value per column (e.g. tokens per turn, oldest left). */
export function vbars(values, title) {
  const W = 640, H = 120, PAD = 4;
  const max = Math.max(1, ...values.map((v) => v.value));
  const w = Math.max(2, (W - PAD * 2) / Math.max(values.length, 1));
  return s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': title },
    s('line', { x1: 0, x2: W, y1: H - 0.5, y2: H - 0.5, class: 'axis' }),
    values.map((v, i) => {
      const bh = (v.value / max) * (H - 10);
      return s('rect', { x: PAD + i * w + 1, y: H - bh, width: Math.max(w - 2, 1), height: bh, class: v.bad ? 'bar-bad' : 'bar-in' },
        s('title', {}, `${v.label}: ${num(v.value)} tokens`));
    }));
}
