// Browser test of takedowns and reports on the demo page, against a running
// stack (`danmaku dev`, or the one internal/sdkweb's TestBrowser starts):
//   node sdk/web/test/takedown.mjs
// Steps 1-6 need takedowns of ids the test chooses, at the moment it
// chooses, so the page's requests to the CDN pass through a fake in front of
// the stack (playwright's routing): the real segments, with a `td` list and messages
// added where a step says so, the real manifest with its `td` count, and a
// takedown list. The report and takedown posts are answered by the fake as
// docs/api.md says the ingest does. Env as browser.mjs, and DANMAKU_ROOM
// (default a random one) with DANMAKU_HOST_TICKET, a host ticket scoped to
// it (without one, the fake plays the host's entry role). Exits 0 when
// every check passes.
import assert from 'node:assert/strict';
import { decode, encode } from '@msgpack/msgpack';
import { launch, env, viewer, until, sleep, provision, failed } from './lib.mjs';

const guard = setTimeout(() => { console.error('takedown test: hung; giving up'); process.exit(2); }, 240e3);
const room = process.env.DANMAKU_ROOM ?? `td-${Math.random().toString(36).slice(2, 8)}`;
const hostTicket = process.env.DANMAKU_HOST_TICKET;
await provision(room);
const bob = await viewer(room, 'bob');
const cdn = bob.entry.cdn.endsWith('/') ? bob.entry.cdn : `${bob.entry.cdn}/`;
const ingest = bob.entry.ingest[0].replace(/\/+$/, '');
const b = await launch();
const { page } = b;
const ok = (what) => console.log(`ok - ${what}`);

// ---- the fake in front of the CDN and the ingest

// What the next segment served gets ({td, m}), the manifest's td count and
// the takedown list (null: 404, as before any takedown).
const fake = { next: { td: [], m: [] }, manifestTd: 0, list: null, segments: 0, listFetches: 0, posts: [], role: null, answers: [] };
const segmentRE = new RegExp(`^${cdn.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}rooms/${room}/(s|ms)/\\d+\\.msgpack$`);
await page.route((u) => u.href.startsWith(`${cdn}rooms/${room}/`), async (route) => {
  const url = route.request().url();
  if (url.endsWith('/takedowns.json')) {
    fake.listFetches++;
    if (!fake.list) return route.continue(); // the stack's own
    return route.fulfill({ status: 200, contentType: 'application/json', headers: { 'Access-Control-Allow-Origin': '*', 'Cache-Control': 'public, max-age=1' }, body: JSON.stringify(fake.list) });
  }
  const resp = await route.fetch();
  if (resp.status() !== 200) return route.fulfill({ response: resp });
  if (url.endsWith('/live.json')) {
    const m = JSON.parse(await resp.text());
    if (fake.manifestTd) m.td = fake.manifestTd;
    return route.fulfill({ response: resp, body: JSON.stringify(m) });
  }
  if (!segmentRE.test(url)) return route.fulfill({ response: resp });
  fake.segments++;
  const { td, m } = fake.next;
  if (td.length === 0 && m.length === 0) return route.fulfill({ response: resp });
  fake.next = { td: [], m: [] };
  const seg = decode(await resp.body());
  seg.m = [...(seg.m ?? []), ...m];
  seg.td = [...(seg.td ?? []), ...td];
  return route.fulfill({ response: resp, body: Buffer.from(encode(seg)) });
});
// The entry: the real one, its role replaced when a step plays a host
// without a host ticket.
await page.route((u) => u.pathname === '/v1/entry', async (route) => {
  const resp = await route.fetch();
  const e = await resp.json();
  if (fake.role) e.role = fake.role;
  return route.fulfill({ response: resp, body: JSON.stringify(e) });
});
// The ingest's report and takedown routes: answered as docs/api.md says.
// As the ingest's CORS does (internal/httpx): Retry-After exposed to the page.
const cors = { 'Access-Control-Allow-Origin': '*', 'Access-Control-Allow-Headers': 'Authorization, Content-Type', 'Access-Control-Allow-Methods': 'POST', 'Access-Control-Expose-Headers': 'Retry-After, Date' };
await page.route((u) => u.href === `${ingest}/v1/rooms/${room}/reports` || u.href === `${ingest}/v1/admin/rooms/${room}/takedowns`, async (route) => {
  const req = route.request();
  if (req.method() === 'OPTIONS') return route.fulfill({ status: 204, headers: cors });
  fake.posts.push({ url: req.url(), auth: req.headers().authorization, body: req.postDataJSON() });
  const [status, body, headers = {}] = fake.answers.shift();
  return route.fulfill({ status, contentType: 'application/json', headers: { ...cors, ...headers }, body: JSON.stringify(body) });
});

// Waits for the next segment the page fetches to carry next ({td, m}).
async function inSegment(next) {
  fake.next = { td: [], m: [], ...next };
  await until('a segment to carry the injection', () => fake.next.td.length === 0 && fake.next.m.length === 0);
}

const stats = () => page.evaluate(() => window.danmakuDemo.stats());
const onStage = (id) => page.evaluate((i) => [...document.querySelectorAll('#comments .comment[data-on]')].some((e) => e.dataset.id === i), id);
const hide = (hidden) => page.evaluate((h) => {
  if (h) Object.defineProperty(document, 'hidden', { configurable: true, get: () => true });
  else delete document.hidden;
  document.dispatchEvent(new Event('visibilitychange'));
}, hidden);

async function open(query) {
  await page.goto(`${env.gslb}/?room=${room}&${query}`);
  await until('the page to join and hold the edge', () => page.evaluate(() => {
    const c = window.danmakuDemo?.client;
    return c?.entry && c.stats().edgeState === 'open' && c.stats().segmentsFetched > 0;
  }));
  // Probes: every message delivered, every comment put on the stage (by id).
  await page.evaluate(() => {
    window.__probe = { delivered: [], launched: [] };
    window.danmakuDemo.client.addEventListener('message', (e) => window.__probe.delivered.push(e.detail.id));
    new MutationObserver((records) => {
      for (const r of records) if (r.target.hasAttribute('data-on')) window.__probe.launched.push(r.target.dataset.id);
    }).observe(document.getElementById('comments'), { attributes: true, attributeFilter: ['data-on'], subtree: true });
  });
}
const probe = () => page.evaluate(() => window.__probe);

try {
  await open('user=alice');
  ok(`joined room ${room}`);

  // 1. On the stage: a takedown in the next segment removes it (a fade).
  const t1 = `take me down ${Math.floor(Math.random() * 1e6)}`;
  await bob.comment(t1);
  const id1 = await until('the comment on the stage', () => page.evaluate((t) =>
    [...document.querySelectorAll('#comments .comment[data-on]')].find((e) => e.textContent === t)?.dataset.id, t1));
  const at = Date.now();
  await inSegment({ td: [{ id: id1, k: 1 }] });
  const carried = Date.now();
  await until('the comment to leave the stage', async () => !(await onStage(id1)));
  let s = await stats();
  assert.ok(s.takedownsApplied >= 1 && s.removedFromStage >= 1, JSON.stringify(s));
  // The status line is redrawn every 500 ms: wait for the redraw.
  await until('the status line to count takedowns', async () => /takedowns [1-9]/.test(await page.textContent('#status')));
  ok(`on the stage: ${id1} taken down by the segment served ${carried - at} ms later, gone from the stage ${Date.now() - carried} ms after that`);

  // 2. Waiting (the page hidden): the takedown drops it from the render
  //    queue, and it never reaches the stage when shown again.
  await hide(true);
  const t2 = `queued then taken down ${Math.floor(Math.random() * 1e6)}`;
  await bob.comment(t2);
  const id2 = await until('the comment to wait in the queue', () => page.evaluate((t) =>
    window.danmakuDemo.queue.barrage.find((m) => m.text === t)?.id, t2));
  await inSegment({ td: [{ id: id2, k: 1 }] });
  await until('the queue to drop it', async () => !(await page.evaluate((i) => window.danmakuDemo.queue.barrage.some((m) => m.id === i), id2)));
  s = await stats();
  assert.ok(s.takedownsDequeued >= 1 && s.render.takenDown >= 1, JSON.stringify(s));
  await hide(false);
  ok(`queued: ${id2} dropped from the render queue`);

  // 3. A later copy (as a replay or a carried segment would bring) is never shown.
  const sup0 = s.takedownsSuppressed;
  await inSegment({ m: [{ id: id1, k: 1, u: 'bob', x: t1 }, { id: id2, k: 1, u: 'bob', x: t2 }] });
  await until('the copies to be suppressed', async () => (await stats()).takedownsSuppressed >= sup0 + 2);
  await sleep(1000); // the frame loop has had its chance to show them
  const p = await probe();
  assert.equal(p.launched.filter((i) => i === id1).length, 1, 'id1: shown once, before its takedown');
  assert.equal(p.launched.filter((i) => i === id2).length, 0, 'id2: never shown');
  ok('later copies of both never shown');

  // 4. A late joiner: the manifest's td says the room holds more than it
  //    has, so it fetches takedowns.json; a listed message is never shown.
  const ms = Date.now() - 500;
  const ghost = `${ms}-9001`, control = `${ms}-9002`;
  fake.list = { v: 1, room, n: 3, ids: [{ id: id1, k: 1 }, { id: id2, k: 1 }, { id: ghost, k: 1 }] };
  fake.manifestTd = 3;
  const lf0 = fake.listFetches;
  await open('user=carol');
  await until('the list to be fetched', async () => (await stats()).takedownListFetches >= 1);
  assert.ok(fake.listFetches > lf0);
  await until('the listed id to be held', () => page.evaluate((g) => window.danmakuDemo.client.takenDown(g), ghost));
  await inSegment({ m: [{ id: ghost, k: 1, u: 'eve', x: 'listed ghost' }, { id: control, k: 1, u: 'eve', x: 'control ghost' }] });
  await until('the control message to be delivered', async () => (await probe()).delivered.includes(control));
  const q = await probe();
  assert.ok(!q.delivered.includes(ghost), 'the listed message is never delivered');
  s = await stats();
  assert.equal(s.takedownListFetches, 1, 'once: later manifests name no more than the list held');
  assert.equal(s.takedownsApplied, 3);
  ok(`late joiner: takedowns.json fetched once (n=3), ${ghost} never shown, ${control} shown`);

  // 5. Report: click a comment, pick a reason; duplicate and rate answers shown.
  const t5 = `report me ${Math.floor(Math.random() * 1e6)}`;
  await bob.comment(t5);
  const el = await until('the comment to report', () => page.evaluateHandle((t) =>
    [...document.querySelectorAll('#comments .comment[data-on]')].find((e) => e.textContent === t) ?? null, t5)
    .then((h) => (h.asElement() ? h : null)));
  const id5 = await el.evaluate((e) => e.dataset.id);
  await el.dispatchEvent('click'); // it moves: playwright's click waits for it to hold still
  assert.equal(await page.isVisible('#reportform'), true);
  assert.equal(await page.$eval('#takedown', (e) => e.hidden), true, 'a viewer is offered no takedown');
  assert.equal(await page.textContent('#reporttext'), `“${t5}”`);
  fake.answers.push([202, { ok: true }], [200, { ok: true, duplicate: true }],
    [429, { error: { code: 'report_rate', message: 'too many reports' } }, { 'Retry-After': '5' }]);
  await page.selectOption('#reason', 'spam');
  for (const want of ['reported, thank you', 'already reported', 'too many reports: try again in 5 s']) {
    await page.evaluate(() => { document.getElementById('reportresult').textContent = ''; });
    await page.click('#report');
    await until(`"${want}"`, async () => (await page.textContent('#reportresult')) === want);
  }
  const token = await page.evaluate(() => window.danmakuDemo.client.entry.token);
  assert.deepEqual(fake.posts[0], { url: `${ingest}/v1/rooms/${room}/reports`, auth: `Bearer ${token}`, body: { id: id5, k: 1, reason: 'spam' } });
  s = await stats();
  assert.deepEqual([s.reportsFiled, s.reportsDuplicate, s.reportsFailed], [1, 1, 1]);
  ok(`reported ${id5} (spam): accepted, then duplicate, then report_rate shown`);

  // 6. A host (its ticket in the fragment): the takedown button posts to the
  //    admin API with the dynamic token, and the comment leaves this stage
  //    at once.
  fake.posts.length = 0;
  if (hostTicket) await open(`user=hana#ticket=${hostTicket}`);
  else {
    fake.role = 'host';
    await open('user=hana');
  }
  assert.equal(await page.evaluate(() => window.danmakuDemo.client.entry.role), 'host');
  assert.equal(await page.$eval('#takedown', (e) => e.hidden), false, 'a host is offered the takedown');
  const t6 = `host takes this down ${Math.floor(Math.random() * 1e6)}`;
  await bob.comment(t6);
  const el6 = await until('the comment to take down', () => page.evaluateHandle((t) =>
    [...document.querySelectorAll('#comments .comment[data-on]')].find((e) => e.textContent === t) ?? null, t6)
    .then((h) => (h.asElement() ? h : null)));
  const id6 = await el6.evaluate((e) => e.dataset.id);
  await el6.dispatchEvent('click');
  fake.answers.push([201, { takedown: { id: id6, k: 1, by: 'hana', reason: 'abuse', at_ms: Date.now() } }]);
  await page.selectOption('#reason', 'abuse');
  await page.click('#takedown');
  await until('"taken down"', async () => (await page.textContent('#reportresult')) === 'taken down');
  await until('the comment to leave the stage', async () => !(await onStage(id6)));
  const htoken = await page.evaluate(() => window.danmakuDemo.client.entry.token);
  assert.deepEqual(fake.posts[0], { url: `${ingest}/v1/admin/rooms/${room}/takedowns`, auth: `Bearer ${htoken}`, body: { id: id6, k: 1, reason: 'abuse' } });
  ok(`host (${hostTicket ? 'a scoped host ticket' : 'the fake\'s entry role'}): took ${id6} down through the admin API; gone from the stage`);

  // 7. The server's own takedowns (DANMAKU_REAL_TAKEDOWNS: "edge" when the
  //    stack relays them to connected viewers, "all" when it also writes
  //    the list and the manifest's td): a host takes a comment down through
  //    the ingest's admin API (from node: no fake in between), and it
  //    leaves the stage of a viewer who holds the edge; a viewer who joins
  //    afterwards fetches the list and holds it.
  const real = process.env.DANMAKU_REAL_TAKEDOWNS;
  if (real && hostTicket) {
    Object.assign(fake, { list: null, manifestTd: 0, role: null });
    await open('user=dora');
    const host = await (await fetch(`${env.gslb}/v1/entry?room=${room}`, { headers: { Authorization: `Bearer ${hostTicket}` } })).json();
    const t7 = `the server takes this down ${Math.floor(Math.random() * 1e6)}`;
    await bob.comment(t7);
    const id7 = await until('the comment on the stage', () => page.evaluate((t) =>
      [...document.querySelectorAll('#comments .comment[data-on]')].find((e) => e.textContent === t)?.dataset.id, t7));
    await page.evaluate((i) => window.danmakuDemo.client.addEventListener('takedown',
      (e) => { if (e.detail.id === i) window.__via = e.detail.via; }), id7);
    const t0 = Date.now();
    const resp = await fetch(`${host.ingest[0].replace(/\/+$/, '')}/v1/admin/rooms/${room}/takedowns`, {
      method: 'POST', body: JSON.stringify({ id: id7, k: 1, reason: 'test' }),
      headers: { Authorization: `Bearer ${host.token}`, 'Content-Type': 'application/json' },
    });
    assert.equal(resp.status, 201, await resp.text());
    const via = await until('the takedown to reach the page', () => page.evaluate(() => window.__via), 10e3);
    await until('the comment to leave the stage', async () => !(await onStage(id7)));
    ok(`server takedown of ${id7}: via ${via}, off the stage ${Date.now() - t0} ms after the POST`);
    if (real === 'all') {
      await open('user=erin');
      await until('the late joiner to hold the server\'s list', () => page.evaluate((i) => window.danmakuDemo.client.takenDown(i), id7), 10e3);
      const st = await stats();
      // It holds the takedown from the list, or — when its first segment is
      // the one whose td carried it, read before the manifest — from that
      // segment; either way it never shows the comment.
      assert.ok(st.takedownListFetches >= 1 || st.takedownsApplied >= 1, JSON.stringify(st));
      const lp = await probe();
      assert.equal(lp.launched.filter((i) => i === id7).length, 0, 'the late joiner never shows it');
      ok(`late joiner holds ${id7} (${st.takedownListFetches ? 'from the server\'s takedowns.json' : 'from the segment that carried it'})`);
    }
  }

  assert.deepEqual(b.errors, [], 'no errors in the page');
  console.log(`segments served through the fake: ${fake.segments}`);
  console.log('takedown test: all checks passed');
} catch (err) {
  await failed(b, err, stats);
} finally {
  await b.close();
  clearTimeout(guard);
}
