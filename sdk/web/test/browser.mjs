// Browser test of the demo page against a running stack (`danmaku dev`, or
// the one sdk/web/web_test.go starts): node sdk/web/test/browser.mjs
// Env: DANMAKU_GSLB (default http://127.0.0.1:7700), DANMAKU_SERVICE_KEY,
// DANMAKU_CHROMIUM. Exits 0 when every check passes.
import assert from 'node:assert/strict';
import { launch, env, viewer, sendGift, until, sleep, provision, failed } from './lib.mjs';

const guard = setTimeout(() => { console.error('browser test: hung; giving up'); process.exit(2); }, 240e3);
const room = `web-${Math.random().toString(36).slice(2, 8)}`;
await provision(room);
const b = await launch();
const { page } = b;
const count = () => page.evaluate(() => document.querySelectorAll('#comments .comment[data-on]').length);
const stats = () => page.evaluate(() => window.danmakuDemo.stats());
const hide = (hidden) => page.evaluate((h) => {
  // Emulated: a headless page is always visible. The SDK reads document.hidden.
  if (h) Object.defineProperty(document, 'hidden', { configurable: true, get: () => true });
  else delete document.hidden; // back to the real (visible) getter
  document.dispatchEvent(new Event('visibilitychange'));
}, hidden);
const ok = (what) => console.log(`ok - ${what}`);

try {
  await page.goto(`${env.gslb}/?room=${room}&user=alice&report=1000`); // reports every second: the Go side checks them
  await until('the page to join and hold the edge', () => page.evaluate(() => {
    const c = window.danmakuDemo?.client;
    return c?.entry && c.stats().edgeState === 'open' && c.stats().segmentsFetched > 0;
  }));
  // Probes: gifts delivered by the SDK, the most comments ever on the stage,
  // and comments put on the stage while hidden.
  await page.evaluate(() => {
    const layer = document.getElementById('comments');
    window.__probe = { gifts: [], max: 0, addedWhileHidden: 0 };
    window.danmakuDemo.client.addEventListener('message', (e) => { if (e.detail.kind === 2) window.__probe.gifts.push(e.detail); });
    new MutationObserver((records) => {
      for (const r of records) if (document.hidden && r.target.hasAttribute('data-on')) window.__probe.addedWhileHidden++;
      window.__probe.max = Math.max(window.__probe.max, layer.querySelectorAll('.comment[data-on]').length);
    }).observe(layer, { attributes: true, attributeFilter: ['data-on'], subtree: true });
  });
  ok(`joined room ${room}`);

  // 1. The send box: the comment comes back through a segment and scrolls.
  const text = `hello from the browser test ${Math.floor(Math.random() * 1e6)}`;
  await page.fill('#text', text);
  await page.press('#text', 'Enter');
  const el = await until('the own comment on the stage', () => page.evaluateHandle((t) =>
    [...document.querySelectorAll('#comments .comment[data-on]')].find((e) => e.textContent === t) ?? null, text)
    .then((h) => (h.asElement() ? h : null)));
  const x0 = (await el.boundingBox()).x;
  await sleep(400);
  const x1 = (await el.boundingBox()).x;
  assert.ok(x1 < x0, `the comment scrolls right to left (x ${x0} then ${x1})`);
  assert.ok(await el.evaluate((e) => e.classList.contains('mine')));
  ok(`sent "${text}" through the send box; it scrolls (x ${Math.round(x0)} → ${Math.round(x1)})`);

  // 2. A flood from many users: never more than 32 comments at once.
  const users = await Promise.all(Array.from({ length: 60 }, (_, i) => viewer(room, `flood${i}`)));
  const flood = (round) => Promise.all(users.map((u, i) => u.comment(`flood ${round}.${i} ${'*'.repeat(i % 15)}`)));
  // 3 each (the ingest's per-user burst), spread over a few segments: the
  // slicer shows a budget per segment and drops the rest of the barrage.
  for (let round = 0; round < 3; round++) {
    await flood(round);
    await sleep(700);
  }
  await until('the stage to fill', async () => (await page.evaluate(() => window.__probe.max)) >= 24, 40e3);
  await sleep(2000);
  const full = await stats();
  const max = await page.evaluate(() => window.__probe.max);
  assert.ok(max <= 32 && full.maxOnStage <= 32, `at most 32 comments at once (saw ${max}, stage says ${full.maxOnStage})`);
  ok(`flood of ${users.length * 3} comments: at most ${max} on the stage at once; render drops ${full.render.drops}`);

  // 3. Hidden: the stage empties, nothing is added, "N new" grows.
  await hide(true);
  await until('the stage to empty', async () => (await count()) === 0);
  const n0 = (await stats()).newCount;
  const away = await Promise.all(Array.from({ length: 40 }, (_, i) => viewer(room, `away${i}`)));
  for (let round = 0; round < 4; round++) {
    await Promise.all(away.map((u, i) => u.comment(`while away ${round}.${i}`)));
    await sleep(500);
  }
  const grown = await until('"N new" to grow', async () => {
    const s = await stats();
    return s.newCount >= n0 + 10 && s;
  }, 40e3);
  const badge = await page.textContent('#newbadge');
  assert.match(badge, /^\d+ new$/);
  assert.equal(await count(), 0, 'nothing on the stage while hidden');
  assert.equal(await page.evaluate(() => window.__probe.addedWhileHidden), 0, 'nothing added while hidden');
  ok(`hidden: stage empty, badge "${badge}", render drops while hidden ${grown.render.droppedHidden}`);
  await hide(false);
  await until('comments to resume', async () => (await count()) > 0);
  assert.equal(await page.isHidden('#newbadge'), true);
  ok('shown again: comments resume, badge gone');

  // 4. A gift through the gift API: shown exactly once, whichever path (edge
  //    or segment) brought it first; the other copy counts as a duplicate.
  const dup0 = (await stats()).duplicates;
  const gift = await sendGift(users[0].entry.ingest[0], {
    order_id: `web-${room}`, room, user: 'gifter', nick: 'Gifter', avatar: 'a1', gift: 'rose', value: 100, count: 1,
  });
  await until('the gift on the strip', () => page.evaluate(() => window.danmakuDemo.gifts.some((g) => g.user === 'gifter')));
  // Wait for the segments past the gift's time (and a carried one) to be read too.
  const giftMs = Number(gift.id.split('-')[0]);
  await until('the segments after the gift', async () => {
    const s = await stats();
    return s.lastSegment && (s.lastSegment.slot + 1) * s.segmentMs >= giftMs + 3000;
  });
  const got = await page.evaluate(() => ({
    delivered: window.__probe.gifts.filter((g) => g.user === 'gifter'),
    shown: window.danmakuDemo.gifts.filter((g) => g.user === 'gifter'),
  }));
  assert.equal(got.delivered.length, 1, `delivered once: ${JSON.stringify(got.delivered)}`);
  assert.equal(got.delivered[0].count, 1);
  assert.equal(got.shown.length, 1, `shown once: ${JSON.stringify(got.shown)}`);
  const dups = (await stats()).duplicates - dup0;
  assert.ok(dups >= 1, 'the second copy (edge and segment both carry every gift) was recognised');
  ok(`gift ${gift.id} shown once (first via ${got.delivered[0].via}; ${dups} duplicate copy skipped)`);

  assert.deepEqual(b.errors, [], 'no errors in the page');
  const s = await stats();
  console.log(`stats: segments ${s.segmentsFetched}, first-poll hits ${s.firstPollHits}/${s.firstPollHits + s.firstPollMisses}, ` +
    `latency ${s.lastSegment.latencyMs} ms, drops ${JSON.stringify({ overflow: s.render.droppedOverflow, hidden: s.render.droppedHidden })}, duplicates ${s.duplicates}`);
  console.log('browser test: all checks passed');
} catch (err) {
  await failed(b, err, stats);
} finally {
  await b.close();
  clearTimeout(guard);
}
