// Time to first render of Mission control in headless Chromium, run by
// `cargo xtask bench dashboard --render` (crates/crewlet-api/examples/render_bench.rs),
// which starts the API on a large company first.
//
// Env: CREWLET_URL (the API), SEATS (the seats the org chart must show),
// RUNS (cold loads, each in a fresh browser context: an empty cache),
// CHROMIUM (default /usr/bin/chromium).
//
// "Rendered" means: every seat's card is in the org chart with its state,
// and the day's figures are painted. The time is the page's own clock
// (performance.now(), from the navigation's start) when that first holds,
// polled on every animation frame.

import { chromium } from 'playwright-core';

const base = process.env.CREWLET_URL;
const seats = Number(process.env.SEATS || 1000);
const runs = Number(process.env.RUNS || 10);
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
if (!base) {
  console.error('CREWLET_URL is not set');
  process.exit(2);
}

const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.round((sorted.length - 1) * p))];

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
});
const cold = [];
const snapshot = [];
let bytes = 0;
try {
  for (let i = 0; i < runs + 1; i++) {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    // The watcher is installed before any of the page's own scripts run.
    await page.addInitScript((want) => {
      const check = () => {
        const cards = document.querySelectorAll('[data-seat][data-state]').length;
        const stats = document.querySelector('[data-stat="turns"] .stat-value');
        if (cards >= want && stats) {
          window.__rendered = performance.now();
          return;
        }
        requestAnimationFrame(check);
      };
      requestAnimationFrame(check);
    }, seats);
    await page.goto(`${base}/dashboard#/mission`, { waitUntil: 'commit' });
    await page.waitForFunction(() => typeof window.__rendered === 'number', null, { timeout: 60000, polling: 50 });
    const m = await page.evaluate(() => {
      const snap = performance.getEntriesByType('resource').find((r) => r.name.includes('/stream/snapshot'));
      const sent = performance.getEntriesByType('resource').reduce((n, r) => n + (r.transferSize || 0), 0)
        + (performance.getEntriesByType('navigation')[0]?.transferSize || 0);
      return { rendered: window.__rendered, snapshot: snap ? snap.duration : null, bytes: sent, cards: document.querySelectorAll('[data-seat]').length };
    });
    if (m.cards < seats) throw new Error(`only ${m.cards} of ${seats} seats rendered`);
    // The first load warms the server (and the browser binary): not counted.
    if (i > 0) {
      cold.push(m.rendered);
      if (m.snapshot != null) snapshot.push(m.snapshot);
      bytes = m.bytes;
    }
    await context.close();
  }
} finally {
  await browser.close();
}
cold.sort((a, b) => a - b);
snapshot.sort((a, b) => a - b);
const f = (x) => `${x.toFixed(0)} ms`;
console.log(`render: Mission control with ${seats} seats, ${runs} cold loads (fresh context each, 1280x800)`);
console.log(`  first render: p50 ${f(pct(cold, 0.5))}  p90 ${f(pct(cold, 0.9))}  max ${f(cold[cold.length - 1])}  (target < 1 s: ${cold[cold.length - 1] < 1000 ? 'met' : 'NOT met'})`);
if (snapshot.length) console.log(`  of which /stream/snapshot: p50 ${f(pct(snapshot, 0.5))}  max ${f(snapshot[snapshot.length - 1])}`);
console.log(`  transferred per cold load: ${(bytes / 1024).toFixed(1)} KB`);
