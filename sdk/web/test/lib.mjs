// Shared by the browser test and the FPS benchmark: the stack's URLs from the
// environment, Debian's chromium through playwright-core (never a downloaded
// browser), and a node-side viewer that posts comments and gifts.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const env = {
  gslb: (process.env.DANMAKU_GSLB ?? 'http://127.0.0.1:7700').replace(/\/+$/, ''),
  // The gift API's service key (the public dev one in `danmaku dev`).
  serviceKey: process.env.DANMAKU_SERVICE_KEY ?? 'dev-service-key',
  chromium: process.env.DANMAKU_CHROMIUM ?? '/usr/bin/chromium',
};

const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'];

/** Launches chromium with a fresh profile (args: more flags); close() also removes the profile. */
export async function launch({ viewport = { width: 1280, height: 860 }, args = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'danmaku-chromium-'));
  const context = await chromium.launchPersistentContext(dir, {
    executablePath: env.chromium, headless: true, args: [...ARGS, ...args], viewport,
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const errors = [];
  page.on('pageerror', (err) => errors.push(String(err)));
  // A due segment not yet written answers 404, which chromium logs as a
  // failed resource: expected, not an error of the page.
  page.on('console', (m) => { if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) errors.push(m.text()); });
  return {
    context, page, errors,
    async close() {
      await context.close().catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function json(resp, what) {
  const body = await resp.text();
  if (!resp.ok) throw new Error(`${what}: HTTP ${resp.status} ${body}`);
  return JSON.parse(body);
}

/**
 * Provisions a room: an event of its own, live from a minute ago for an hour,
 * created through the operator API (only rooms of live events exist).
 */
export async function provision(room, settings = {}) {
  const now = Date.now();
  const ev = {
    id: room, start: new Date(now - 60_000).toISOString(), end: new Date(now + 3_600_000).toISOString(),
    rooms: [{ id: room, ...settings }],
  };
  const resp = await fetch(`${env.gslb}/v1/admin/events`, {
    method: 'POST', body: JSON.stringify(ev),
    headers: { Authorization: `Bearer ${env.serviceKey}`, 'Content-Type': 'application/json' },
  });
  return json(resp, 'create event');
}

/** A node-side viewer: a dev ticket, an entry, and posts to the ingest it names (no Origin: a native client). */
export async function viewer(room, user) {
  const q = new URLSearchParams({ user, nick: user.slice(0, 6) });
  const { ticket } = await json(await fetch(`${env.gslb}/v1/dev/ticket?${q}`), 'dev ticket');
  const entry = await json(await fetch(`${env.gslb}/v1/entry?room=${room}`, { headers: { Authorization: `Bearer ${ticket}` } }), 'entry');
  return {
    entry,
    async comment(text) {
      const resp = await fetch(`${entry.ingest[0]}/v1/rooms/${room}/barrage`, {
        method: 'POST', body: JSON.stringify({ text }),
        headers: { Authorization: `Bearer ${entry.token}`, 'Content-Type': 'application/json' },
      });
      return json(resp, 'barrage');
    },
  };
}

/** Sends a gift through the gift API (server to server) of the ingest the entry named. */
export async function sendGift(ingest, body) {
  const resp = await fetch(`${ingest}/v1/gifts`, {
    method: 'POST', body: JSON.stringify(body),
    headers: { Authorization: `Bearer ${env.serviceKey}`, 'Content-Type': 'application/json' },
  });
  return json(resp, 'gift');
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls fn until it returns a truthy value; throws with what after timeoutMs (a hang guard, not a speed check). */
export async function until(what, fn, timeoutMs = 30000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/** Says why a browser test failed: the error, the page's errors and its stats() (when the page is still there); exit code 1. */
export async function failed(b, err, stats) {
  console.error(`not ok - ${err.stack ?? err}`);
  if (b.errors.length) console.error('page errors:', b.errors);
  try {
    console.error('page stats:', JSON.stringify(await stats()));
  } catch { /* the page is gone */ }
  process.exitCode = 1;
}
