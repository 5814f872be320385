// Unit tests of the browser SDK's pure parts, and of the client's schedule
// against a fake CDN, entry and edge. No browser: node --test sdk/web/test/unit.test.mjs
// (after `npm ci` in sdk/web, for @msgpack/msgpack).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encode } from '@msgpack/msgpack';
import {
  segmentKey, manifestKey, dueMs, liveSlot, clockFromEntry, pollRetryMs, nextBackoff, jittered,
  parseID, compareIDs, identityOf, normalizeText, checkText, SendQueue, SeenSet, admit, RenderQueue,
  decodeSegment, decodeFrame, segmentMatches, manifestSlot, toMessage, DanmakuClient, watchVisibility,
  KIND_BARRAGE, KIND_GIFT, KIND_SYSTEM, CLOSE, LATENCY_BOUNDS_MS, latencyBucket,
  TakedownSet, toTakedowns, decodeTakedownList, manifestTakedowns, takedownListKey, REPORT_REASONS, PROTOCOL,
  HoldQueue, PLAYHEAD, playheadOf, readPlayhead, DanmakuReplay,
} from '../danmaku.js';

const msg = (id, kind = KIND_BARRAGE, extra = {}) => ({ ...toMessage({ id, k: kind }, 'segment'), ...extra });
const gift = (id, user, code, count = 1) => msg(id, KIND_GIFT, { user, gift: code, count });

test('segment and manifest keys', () => {
  assert.equal(segmentKey('demo', 1700000000, 1000), 'rooms/demo/s/1700000000.msgpack');
  assert.equal(segmentKey('demo', 3400000001, 500), 'rooms/demo/ms/1700000000500.msgpack');
  assert.equal(segmentKey('r_1', 6800000003, 250), 'rooms/r_1/ms/1700000000750.msgpack');
  assert.equal(manifestKey('demo'), 'rooms/demo/live.json');
});

test('due time and live slot are inverse, for every segment duration', () => {
  for (const segmentMs of [1000, 500, 250]) {
    const s = { segmentMs, publishDelayMs: 300, marginMs: 7 };
    for (const slot of [0, 1, 41, 6800000003]) {
      const due = dueMs(slot, s);
      assert.equal(due, (slot + 1) * segmentMs + 307);
      assert.equal(liveSlot(due, s), slot, 'due at its due time');
      assert.equal(liveSlot(due - 0.5, s), slot - 1, 'not a moment before');
    }
  }
  assert.equal(pollRetryMs(1000), 200);
  assert.equal(pollRetryMs(500), 125);
  assert.equal(pollRetryMs(250), 62.5);
});

test('clock offset and margin from the entry round trip', () => {
  // Sent at local 1000, answered at 1040 with server time 5000: the server
  // stamped it mid-flight, so it is 5020 at local 1040.
  assert.deepEqual(clockFromEntry(5000, 1000, 1040), { offsetMs: 5000 + 20 - 1040, marginMs: 21, atMs: 1040 });
  assert.deepEqual(clockFromEntry(5000, 1000, 1000), { offsetMs: 4000, marginMs: 1, atMs: 1000 });
  assert.equal(clockFromEntry(5000, 1000, 1003).marginMs, 2, 'strictly above half the round trip');
  assert.equal(clockFromEntry(5000, 1000, 990).marginMs, 1, 'a clock that went back counts as no round trip');
});

test('back-off doubles within bounds, jitter stays in [b/2, b]', () => {
  assert.equal(nextBackoff(0, 400, 5000), 400);
  assert.equal(nextBackoff(400, 400, 5000), 800);
  assert.equal(nextBackoff(4000, 400, 5000), 5000);
  assert.equal(jittered(1000, () => 0), 500);
  assert.equal(jittered(1000, () => 0.999999) < 1000, true);
});

test('ids order like wire.CompareIDs, identities carry the lane', () => {
  assert.deepEqual(parseID('1700000000120-3'), [1700000000120, 3n]);
  assert.equal(parseID('x-1'), null);
  assert.equal(compareIDs('1-2', '1-10'), -1);
  assert.equal(compareIDs('2-0', '1-10'), 1);
  assert.equal(compareIDs('1-1', '1-1'), 0);
  assert.equal(compareIDs('', '1-0'), -1, 'malformed sorts first');
  assert.equal(identityOf(KIND_BARRAGE, '1-0'), 'b/1-0');
  assert.equal(identityOf(KIND_GIFT, '1-0'), 'l/1-0');
  assert.equal(identityOf(KIND_SYSTEM, '1-0'), 'l/1-0');
  assert.equal(identityOf(KIND_SYSTEM, '1-0', true), 's/1-0', 'a site-wide broadcast has a lane of its own');
});

test('text normalisation and length like the Go SDK', () => {
  assert.equal(normalizeText('  a \t\n b\u3000c\u0085 '), 'a b c');
  assert.equal(normalizeText('\ufeffa'), '\ufeffa', 'U+FEFF is not a space to Go');
  assert.equal(normalizeText('a\ud800b'), 'ab', 'invalid UTF-16 dropped like invalid UTF-8');
  assert.throws(() => checkText(' \n '), { code: 'empty_text' });
  assert.equal(checkText('😀'.repeat(60)), '😀'.repeat(60), '60 code points');
  assert.throws(() => checkText('😀'.repeat(61)), { code: 'text_too_long' });
  assert.equal(checkText(' x '.repeat(30)).length, 59, 'limits apply after collapsing');
});

test('send queue: one post per interval, 5 waiting dropping the oldest, same text within 10 s deduplicated', () => {
  const q = new SendQueue(5, 1200, 10000);
  assert.deepEqual(q.push('a', 0), { deduped: false, dropped: false, heldBack: false });
  assert.deepEqual(q.next(0), { text: 'a' });
  assert.deepEqual(q.push('b', 100), { deduped: false, dropped: false, heldBack: true }, 'inside the interval');
  assert.deepEqual(q.next(100), { until: 1200 });
  assert.deepEqual(q.next(1200), { text: 'b' });
  assert.equal(q.push('a', 5000).deduped, true, 'same text within 10 s');
  assert.equal(q.push('a', 10000).deduped, false, '10 s after it was accepted');
  for (const t of ['c', 'd', 'e', 'f']) q.push(t, 10001);
  assert.equal(q.length, 5);
  assert.equal(q.push('g', 10002).dropped, true);
  assert.equal(q.length, 5);
  assert.equal(q.push('a', 10003).dropped, true, 'a was dropped unsent: typing it again queues it');
  const sent = [];
  for (let now = 10003, n; (n = q.next(now)); now = n.until ?? now) if (n.text) sent.push(n.text);
  assert.deepEqual(sent, ['d', 'e', 'f', 'g', 'a']);
});

test('seen set forgets the oldest beyond its count and its window', () => {
  const s = new SeenSet(3, 1000);
  for (const [k, at] of [['a', 0], ['b', 10], ['c', 20], ['d', 30]]) s.add(k, at);
  assert.equal(s.has('a'), false);
  assert.equal(s.size, 3);
  s.add('e', 1015);
  assert.deepEqual([...s.ids.keys()], ['c', 'd', 'e'].filter((k) => s.has(k)));
  assert.equal(s.has('b'), false);
  assert.equal(s.has('c'), true, 'added 995 ms before: inside the window');
  s.add('f', 1025);
  assert.equal(s.has('c'), false, 'added 1005 ms before');
});

test('merge: identity by lane and id, merged gifts show only what the edge did not', () => {
  const seen = new SeenSet();
  assert.ok(admit(seen, msg('1-0'), 0));
  assert.equal(admit(seen, msg('1-0'), 0), null, 'same barrage twice');
  assert.ok(admit(seen, gift('1-0', 'bob', 'rose'), 0), 'a gift may share a barrage id');
  assert.equal(admit(seen, gift('1-0', 'bob', 'rose'), 0), null, 'a gift already seen');
  // The edge showed 1-0 and 2-0; the segment merges 1-0, 2-0, 3-0, 4-0 under 2-0.
  assert.ok(admit(seen, gift('2-0', 'bob', 'rose'), 0));
  const merged = { ...gift('2-0', 'bob', 'rose', 4), ids: ['1-0', '2-0', '3-0', '4-0'] };
  const out = admit(seen, merged, 0);
  assert.deepEqual([out.id, out.count, out.ids], ['3-0', 2, ['3-0', '4-0']]);
  assert.deepEqual(merged.ids, ['1-0', '2-0', '3-0', '4-0'], 'the input is not changed');
  assert.equal(admit(seen, merged, 0), null, 'every id shown');
  // A count that is not one gift per id is shown whole rather than lost.
  const odd = { ...gift('5-0', 'amy', 'car', 10), ids: ['5-0', '6-0'] };
  admit(seen, gift('6-0', 'amy', 'car'), 0);
  const o = admit(seen, odd, 0);
  assert.deepEqual([o.id, o.count, o.ids], ['5-0', 10, ['5-0']]);
  assert.equal(admit(seen, gift('5-0', 'amy', 'car'), 0), null, 'its ids are now seen');
});

test('render queue: 32 slots held for the display time, 120 waiting dropping the oldest barrage, gifts first', () => {
  let now = 0;
  const q = new RenderQueue({ now: () => now });
  for (let i = 0; i < 130; i++) q.push(msg(`${i}-0`));
  assert.equal(q.length, 120);
  assert.equal(q.stats().droppedOverflow, 10);
  q.push(gift('200-0', 'bob', 'rose'));
  assert.equal(q.length, 120, 'a gift takes the place of the oldest barrage');
  assert.equal(q.next().kind, KIND_GIFT, 'gifts first');
  assert.equal(q.next().id, '11-0', 'then barrage, oldest kept first');
  for (let i = 0; i < 30; i++) assert.ok(q.next());
  assert.equal(q.onScreen(), 32);
  assert.equal(q.next(), null, 'every slot taken');
  now = 7999;
  assert.equal(q.next(), null);
  now = 8000;
  assert.ok(q.next(), 'slots free after the display time');
  // Full of gifts: they go beyond the buffer, never dropped; barrage is.
  const g = new RenderQueue({ buffer: 3, now: () => now });
  for (let i = 0; i < 5; i++) g.push(gift(`${i}-0`, `u${i}`, 'rose'));
  g.push(msg('9-0'));
  assert.deepEqual([g.length, g.stats().beyondBuffer, g.stats().droppedOverflow], [5, 2, 1]);
});

test('render queue hidden: nothing shown, N new counted, drops by reason, oldest first when shown again', () => {
  let now = 0;
  const q = new RenderQueue({ visible: 2, buffer: 4, now: () => now });
  q.next();
  q.push(msg('1-0'));
  assert.ok(q.next());
  q.setHidden(true);
  assert.equal(q.onScreen(), 0, 'hiding empties the screen');
  for (let i = 2; i < 8; i++) q.push(msg(`${i}-0`));
  assert.equal(q.next(), null);
  assert.equal(q.newCount, 6);
  assert.deepEqual([q.stats().droppedHidden, q.stats().droppedOverflow, q.drops()], [2, 0, 2]);
  q.setHidden(false);
  assert.equal(q.newCount, 0);
  assert.deepEqual([q.next().id, q.next().id, q.next()], ['4-0', '5-0', null]);
});

test('render queue hidden: gifts beyond the buffer collapse per (user, gift), counts never lost', () => {
  const q = new RenderQueue({ buffer: 10, visible: 1e6, now: () => 0 });
  q.setHidden(true);
  let received = 0, n = 0;
  for (let i = 0; i < 2000; i++) {
    if (i % 3 === 0) q.push(msg(`${i}-0`));
    const c = 1 + (i % 4);
    q.push(gift(`${i}-1`, `user${i % 7}`, i % 2 ? 'rose' : 'car', c));
    received += c;
    n++;
  }
  assert.ok(q.length <= 10 + 2, `bounded by the buffer and the gift catalogue: ${q.length} waiting`);
  assert.equal(q.newCount, n + 667);
  assert.ok(q.stats().collapsedGifts > 0);
  q.setHidden(false);
  let shown = 0;
  for (let m; (m = q.next());) if (m.kind === KIND_GIFT) shown += m.count;
  assert.equal(shown, received, 'the sum of gift counts shown equals the sum received');
});

test('render queue hidden: the same sender, gift and value first, else the same gift and value from several viewers', () => {
  const q = new RenderQueue({ buffer: 2, now: () => 0 });
  q.setHidden(true);
  q.push({ ...gift('1-0', 'amy', 'rose', 1), value: 100 });
  q.push({ ...gift('2-0', 'bob', 'rose', 1), value: 100 });
  q.push({ ...gift('3-0', 'bob', 'rose', 2), value: 100 }); // bob's
  q.push({ ...gift('4-0', 'cat', 'rose', 4), value: 100 }); // amy's, oldest of the gift, now several viewers
  q.push({ ...gift('5-0', 'cat', 'rose', 1), value: 500 }); // another value: beyond the buffer
  q.setHidden(false);
  const out = [q.next(), q.next(), q.next()].map((m) => [m.user, m.count, m.value, m.ids.length]);
  assert.deepEqual(out, [['', 5, 100, 0], ['bob', 3, 100, 0], ['cat', 1, 500, 0]]);
  assert.deepEqual([q.stats().collapsedGifts, q.stats().beyondBuffer], [2, 1]);
});

test('visibility: hidden while document.hidden', () => {
  const doc = new EventTarget();
  doc.hidden = false;
  const q = new RenderQueue();
  const stop = watchVisibility(q, doc);
  doc.hidden = true;
  doc.dispatchEvent(new Event('visibilitychange'));
  assert.equal(q.hidden, true);
  stop();
  doc.hidden = false;
  doc.dispatchEvent(new Event('visibilitychange'));
  assert.equal(q.hidden, true, 'no longer watched');
});

const segBytes = (o) => encode({ v: 1, room: 'demo', t: 5, seq: 1, dur: 1000, m: [], ...o });

test('segments, frames and manifests decode as docs/segment-format.md says', () => {
  const s = decodeSegment(segBytes({ m: [{ id: '5120-0', k: 1, o: 120, u: 'alice', x: 'hi', zz: 'unknown keys ignored' }] }));
  assert.deepEqual(s.messages[0], { id: '5120-0', kind: 1, offset: 120, user: 'alice', nick: '', avatar: '', text: 'hi', gift: '', value: 0, count: 1, ids: [], role: '', via: 'segment', site: false, playheadMs: 0 });
  assert.equal(decodeSegment(segBytes({ m: [{ id: '5120-0', k: 1, p: 4100 }] })).messages[0].playheadMs, 4100, 'p is the sender\'s playhead');
  assert.throws(() => decodeSegment(segBytes({ m: [{ id: '1-0', k: 1, p: -1 }] })), { code: 'decode' });
  assert.throws(() => decodeSegment(segBytes({ m: [{ id: '1-0', k: 1, p: 'x' }] })), { code: 'decode' });
  assert.ok(segmentMatches(s, 'demo', 5, 1000));
  assert.ok(!segmentMatches(s, 'demo', 6, 1000));
  assert.ok(!segmentMatches(s, 'other', 5, 1000));
  const v2 = decodeSegment(segBytes({ v: 2, ms: 5500, dur: 500 }));
  assert.ok(segmentMatches(v2, 'demo', 11, 500));
  assert.ok(!segmentMatches(s, 'demo', 10, 500), 'a 1 s segment is not a 500 ms slot');
  assert.ok(!segmentMatches(v2, 'demo', 22, 250), 'nor is a 500 ms one a 250 ms slot');
  assert.throws(() => decodeSegment(segBytes({ v: 3 })), { code: 'version' });
  assert.throws(() => decodeSegment(segBytes({ m: [{ id: '1-0', k: 9 }] })), { code: 'decode' });
  assert.throws(() => decodeSegment(segBytes({ m: [{ id: 'x', k: 1 }] })), { code: 'decode' });
  assert.throws(() => decodeSegment(segBytes({ m: [{ id: '1-0', k: 1, o: 1000 }] })), { code: 'decode' });
  assert.throws(() => decodeSegment(new Uint8Array([0xdd, 0x7f, 0xff, 0xff, 0xff])), { code: 'decode' }, 'a length bomb');
  assert.throws(() => decodeSegment(encode([1, 2])), { code: 'decode' });
  const f = decodeFrame(encode({ v: 1, room: 'demo', m: [{ id: '9-0', k: 2, g: 'rose', v: 100, c: 3, ids: ['7-0', '8-0', '9-0'] }] }));
  assert.deepEqual([f.messages[0].count, f.messages[0].ids.length, f.messages[0].via], [3, 3, 'edge']);
  assert.equal(manifestSlot({ v: 1, room: 'demo', t: 41, seq: 42, dur: 1000 }, 'demo', 1000), 41);
  assert.equal(manifestSlot({ v: 2, room: 'demo', t: 41, seq: 42, dur: 250, ms: 41750 }, 'demo', 250), 167);
  assert.equal(manifestSlot({ v: 1, room: 'demo', t: 41, seq: 42 }, 'demo', 250), 164, 'a whole second, on a 250 ms grid');
  assert.equal(manifestSlot({ v: 2, room: 'demo', t: 41, seq: 42 }, 'demo', 250), null, 'v2 without ms');
  assert.equal(manifestSlot({ v: 1, room: 'x', t: 41, seq: 42 }, 'demo', 1000), null);
});

// ---------------------------------------------------------------- client against fakes

// A fake stack on the real clock with a 250 ms room: the server clock is the
// local one plus 1 h, so a client that ignored the offset would be caught.
// Nothing here depends on how fast the machine is: the first request for
// each slot answers 404 (the slicer a little late), and no segment is
// written before the test says `ready`.
function fakeStack() {
  const D = 250, delay = 30, skew = 3600e3;
  const server = () => performance.now() + skew;
  const cdn = 'http://cdn.test/';
  const log = { early: [], segs: [], sockets: [], posts: [], asked: new Set(), ready: false, entries: 0 };
  let seq = 0;
  const fetch = async (url, init = {}) => {
    const json = (status, body) => new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });
    if (url.startsWith('http://gslb.test/v1/entry')) {
      const now = server();
      const token = log.entries++ === 0 ? 'tok' : `tok${log.entries}`; // a fresh one per entry
      return json(200, { room: 'demo', user: 'u', role: 'viewer', ingest: ['http://ingest.test'], edge: ['ws://edge.test/v1/ws'], cdn, token, token_expires_ms: now + 600e3, server_time_ms: Math.floor(now), segment_ms: D, publish_delay_ms: delay, sync: true });
    }
    if (url.startsWith('http://ingest.test/')) {
      log.posts.push({ url, auth: init.headers.Authorization, body: init.body, at: performance.now() });
      return json(200, { ok: true });
    }
    const m = /rooms\/demo\/ms\/(\d+)\.msgpack$/.exec(url);
    if (m) {
      const slot = Number(m[1]) / D;
      if (server() < (slot + 1) * D + delay) log.early.push(slot);
      const firstAsk = !log.asked.has(slot);
      log.asked.add(slot);
      if (firstAsk || !log.ready) return new Response(null, { status: 404 });
      const msgs = [];
      // Two gifts merged into one message, carried by the first segment
      // (ids are from before the join: the slicer carries what did not fit).
      if (log.segs.length === 0) msgs.push({ id: '1000-0', k: 2, u: 'bob', g: 'rose', c: 2, ids: ['1000-0', '1000-1'] });
      log.segs.push(slot);
      return new Response(encode({ v: 2, room: 'demo', t: Math.floor((slot * D) / 1000), seq: ++seq, dur: D, ms: slot * D, m: msgs }));
    }
    return new Response(null, { status: 404 });
  };
  class FakeWS extends EventTarget {
    constructor(url) {
      super();
      Object.assign(this, { url, sent: [], readyState: 0 });
      log.sockets.push(this);
      setTimeout(() => { this.readyState = 1; this.onopen?.(); }, 5);
    }
    send(d) { this.sent.push(d); }
    close(code = 1000) { this.readyState = 3; setTimeout(() => this.onclose?.({ code }), 0); }
    frame(o) { this.onmessage?.({ data: encode(o).slice().buffer }); }
  }
  return { fetch, FakeWS, log, server, D };
}

test('client: due-time polling, edge hello, merged gift once, throttled send', async () => {
  const fs = fakeStack();
  const render = new RenderQueue();
  const c = new DanmakuClient({ entryURL: 'http://gslb.test/', room: 'demo', ticket: 't', firstJoinJitterMs: 0, fetch: fs.fetch, WebSocket: fs.FakeWS, render });
  const got = [];
  c.addEventListener('message', (e) => got.push(e.detail));
  const order = [];
  c.addEventListener('segment', (e) => order.push(e.detail.slot));
  const run = c.start();
  await new Promise((r) => c.addEventListener('entry', r, { once: true }));
  while (fs.log.sockets.length === 0 || fs.log.sockets[0].sent.length === 0) await new Promise((r) => setTimeout(r, 10));
  const ws = fs.log.sockets[0];
  assert.equal(ws.url, `ws://edge.test/v1/ws?proto=${PROTOCOL}`, 'the protocol in the URL, never the token');
  assert.deepEqual(JSON.parse(ws.sent[0]), { token: 'tok' }, 'the token is the first frame');
  // The edge shows one of the two gifts of slot `first` before its segment.
  ws.frame({ v: 1, room: 'demo', m: [{ id: '1000-1', k: 2, u: 'bob', g: 'rose' }] });
  fs.log.ready = true;
  c.send('hello');
  c.send('hello');
  c.send('again');
  while (order.length < 4) await new Promise((r) => setTimeout(r, 50));
  c.stop();
  await run;
  assert.deepEqual(fs.log.early, [], 'no segment asked for before it was due');
  const gifts = got.filter((m) => m.kind === KIND_GIFT);
  assert.equal(gifts.reduce((n, m) => n + m.count, 0), 2, 'two gifts, each shown once');
  assert.deepEqual(gifts.map((m) => m.via), ['edge', 'segment']);
  for (let i = 1; i < order.length; i++) assert.ok(order[i] > order[i - 1], 'slots in order');
  const st = c.stats();
  assert.equal(st.segmentMs, 250);
  assert.equal(st.firstPollHits, 0, 'every first poll was answered 404 here');
  assert.ok(st.firstPollMisses >= order.length && st.notFoundRetries >= st.firstPollMisses, '404s counted');
  assert.equal(st.sendsDeduped, 1);
  assert.deepEqual(fs.log.posts.map((p) => JSON.parse(p.body).text), ['hello', 'again'].slice(0, fs.log.posts.length));
  for (let i = 1; i < fs.log.posts.length; i++) assert.ok(fs.log.posts[i].at - fs.log.posts[i - 1].at >= 1199, 'one post per 1.2 s');
  assert.equal(fs.log.posts[0].auth, 'Bearer tok');
  assert.equal(st.render.pushed, got.length);
  assert.ok(st.lastSegment.latencyMs >= 30, 'latency is measured on the server clock');
});

test('client: a segment of another slot is asked again 3 times, then skipped; seq gaps counted', async () => {
  const fs = fakeStack();
  let mismatched = 0, gapped = false, seq = 0, target = null;
  const fetch = async (url, init) => {
    const m = /ms\/(\d+)\.msgpack$/.exec(url);
    if (!m) return fs.fetch(url, init);
    const slot = Number(m[1]) / fs.D;
    target ??= slot + 1; // the slot after the first one asked for
    if (fs.server() < (slot + 1) * fs.D + 30) return new Response(null, { status: 404 });
    if (slot === target && mismatched < 4) {
      mismatched++;
      return new Response(encode({ v: 2, room: 'demo', t: 0, seq: 1, dur: 250, ms: 0, m: [] }));
    }
    if (slot === target + 1 && !gapped) { gapped = true; seq += 5; }
    return new Response(encode({ v: 2, room: 'demo', t: 0, seq: ++seq, dur: 250, ms: slot * fs.D, m: [] }));
  };
  const c = new DanmakuClient({ entryURL: 'http://gslb.test', room: 'demo', ticket: 't', firstJoinJitterMs: 0, fetch, noEdge: true });
  const slots = [];
  c.addEventListener('segment', (e) => slots.push(e.detail.slot));
  const run = c.start();
  while (slots.length < 4) await new Promise((r) => setTimeout(r, 50));
  c.stop();
  await run;
  const st = c.stats();
  assert.equal(mismatched, 4);
  assert.deepEqual([st.mismatchRetries, st.mismatchSkipped], [3, 1]);
  assert.ok(!slots.includes(target), 'the mismatched slot was skipped');
  assert.equal(st.seqGaps, 1);
});

test('client: an unknown segment_ms is refused clearly', async () => {
  const fetch = async () => new Response(JSON.stringify({ room: 'demo', token: 't', cdn: 'x', server_time_ms: 1, segment_ms: 300, publish_delay_ms: 0 }));
  const c = new DanmakuClient({ entryURL: 'http://gslb.test', room: 'demo', ticket: 't', firstJoinJitterMs: 0, fetch });
  await assert.rejects(c.start(), { code: 'bad_entry', message: /segment_ms 300/ });
});

test('client: follows a change of the room\'s segment duration that the manifest names', async () => {
  const skew = 3600e3, server = () => performance.now() + skew, delay = 20;
  let joinedMs = 0;
  const fetch = async (url) => {
    const now = server();
    if (url.includes('/v1/entry')) {
      joinedMs = now;
      return new Response(JSON.stringify({ room: 'demo', token: 't', cdn: 'http://cdn.test', server_time_ms: Math.floor(now), token_expires_ms: now + 600e3, segment_ms: 250, publish_delay_ms: delay, edge: [], ingest: [] }));
    }
    // The room switched to 500 ms segments before the client joined: only
    // those exist, and the manifest names the newest.
    const newest = Math.floor((now - delay) / 500) - 1;
    if (url.endsWith('live.json')) {
      return new Response(JSON.stringify({ v: 2, room: 'demo', t: Math.floor((newest * 500) / 1000), seq: newest, dur: 500, ms: newest * 500 }));
    }
    const m = /ms\/(\d+)\.msgpack$/.exec(url);
    const start = m ? Number(m[1]) : -1;
    if (start % 500 !== 0 || start / 500 > newest || start < 0) return new Response(null, { status: 404 });
    return new Response(encode({ v: 2, room: 'demo', t: Math.floor(start / 1000), seq: start / 500, dur: 500, ms: start, m: [] }));
  };
  const c = new DanmakuClient({ entryURL: 'http://gslb.test', room: 'demo', ticket: 't', firstJoinJitterMs: 0, fetch, noEdge: true });
  const slots = [];
  c.addEventListener('segment', (e) => slots.push(e.detail.slot));
  const run = c.start();
  while (slots.length < 3) await new Promise((r) => setTimeout(r, 50));
  c.stop();
  await run;
  const st = c.stats();
  assert.equal(st.segmentMs, 500);
  assert.ok(slots[0] * 500 >= Math.floor(joinedMs / 250) * 250, 'nothing before the slot joined in');
  assert.deepEqual(slots.slice(1).map((s, i) => s - slots[i]), [1, 1], 'then every 500 ms slot in order');
  assert.equal(st.seqGaps, 0);
});

// ---------------------------------------------------------------- ingest addresses

// An entry naming three ingest nodes (the user's own first) and no edge; each
// node answers through answer(node, n), n counting that node's posts from 0
// (null: {"ok":true}). The CDN answers 404: only the posts matter here.
const NODES = ['http://primary.test', 'http://fallback-1.test', 'http://fallback-2.test'];
const UNAVAILABLE = { status: 503, code: 'backend_unavailable' };
const NOT_PRIMARY = { status: 421, code: 'not_primary', retryAfter: '1' };

function ingestStack(answer, nodes = NODES) {
  const log = [];
  const fetch = async (url) => {
    const now = Date.now();
    if (url.includes('/v1/entry')) {
      return new Response(JSON.stringify({ room: 'demo', token: 'tok', cdn: 'http://cdn.test/', server_time_ms: now, token_expires_ms: now + 600e3, segment_ms: 1000, publish_delay_ms: 50, edge: [], ingest: nodes }));
    }
    const node = nodes.findIndex((b) => url.startsWith(`${b}/v1/rooms/demo/`));
    if (node < 0) return new Response(null, { status: 404 });
    const n = log.filter((p) => p.node === node).length;
    log.push({ node, at: performance.now() });
    const a = answer(node, n);
    if (!a) return new Response(JSON.stringify({ ok: true }));
    const headers = a.retryAfter ? { 'Retry-After': a.retryAfter } : {};
    return new Response(JSON.stringify({ error: { code: a.code, message: 'test' } }), { status: a.status, headers });
  };
  return { fetch, log };
}

// Sends one comment through a client on st and returns its 'sent' event.
async function sendOne(st) {
  const c = new DanmakuClient({ entryURL: 'http://gslb.test', room: 'demo', ticket: 't', firstJoinJitterMs: 0, fetch: st.fetch, noEdge: true });
  const sent = [];
  c.addEventListener('sent', (e) => sent.push(e.detail));
  const run = c.start();
  await new Promise((r) => c.addEventListener('entry', r, { once: true }));
  c.send('hello');
  while (sent.length === 0) await new Promise((r) => setTimeout(r, 20));
  c.stop();
  await run;
  return { sent: sent[0], stats: c.stats() };
}

test('send: a fallback\'s 421 not_primary sends the comment back to the first ingest address after Retry-After', async () => {
  const st = ingestStack((node, n) => {
    if (node === 0 && n === 0) return UNAVAILABLE; // a passing failure of the primary
    return node === 1 ? NOT_PRIMARY : null;
  });
  const { sent, stats } = await sendOne(st);
  assert.equal(sent.ok, true);
  assert.deepEqual(st.log.map((p) => p.node), [0, 1, 0], 'primary, fallback, primary');
  assert.ok(st.log[2].at - st.log[1].at >= 999, 'back to the primary only after Retry-After');
  assert.equal(stats.sendsPosted, 1);
});

test('send: going back to the primary is bounded, and the comment then fails with not_primary', async () => {
  const st = ingestStack((node) => (node === 0 ? UNAVAILABLE : NOT_PRIMARY), NODES.slice(0, 2));
  const { sent, stats } = await sendOne(st);
  assert.equal(sent.ok, false);
  assert.equal(sent.error.code, 'not_primary');
  assert.deepEqual(st.log.map((p) => p.node), [0, 1, 0, 1, 0, 1, 0, 1], 'three returns to the primary');
  assert.equal(stats.sendsFailed, 1);
});

test('send: failover to the next address on errors and wrong_node stays; other refusals are final', async () => {
  const cases = [
    { name: 'server error', answer: (node) => (node === 0 ? UNAVAILABLE : null), nodes: [0, 1], ok: true },
    { name: 'two failing', answer: (node) => (node < 2 ? { status: 502, code: 'http_502' } : null), nodes: [0, 1, 2], ok: true },
    { name: 'wrong_node', answer: (node) => (node === 0 ? { status: 403, code: 'wrong_node' } : null), nodes: [0, 1], ok: true },
    { name: 'not_primary from the first address', answer: (node) => (node === 0 ? NOT_PRIMARY : null), nodes: [0, 1], ok: true },
    { name: 'other refusal', answer: () => ({ status: 400, code: 'text_too_long' }), nodes: [0], ok: false },
  ];
  for (const tc of cases) {
    const st = ingestStack(tc.answer);
    const { sent } = await sendOne(st);
    assert.equal(sent.ok, tc.ok, tc.name);
    assert.deepEqual(st.log.map((p) => p.node), tc.nodes, tc.name);
  }
});

test('client: a resume close keeps last; a resume-gap close starts fresh', async () => {
  for (const [code, want] of [[CLOSE.RESUME, { token: 'tok', last: '1000-1' }], [CLOSE.RESUME_GAP, { token: 'tok' }]]) {
    const fs = fakeStack();
    const c = new DanmakuClient({ entryURL: 'http://gslb.test/', room: 'demo', ticket: 't', firstJoinJitterMs: 0, rejoinJitterMs: 0, fetch: fs.fetch, WebSocket: fs.FakeWS });
    const run = c.start();
    while (fs.log.sockets.length === 0 || fs.log.sockets[0].sent.length === 0) await new Promise((r) => setTimeout(r, 10));
    const ws = fs.log.sockets[0];
    ws.frame({ v: 1, room: 'demo', m: [{ id: '1000-1', k: 2, u: 'bob', g: 'rose' }] });
    ws.close(code);
    while (fs.log.sockets.length < 2 || fs.log.sockets[1].sent.length === 0) await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(JSON.parse(fs.log.sockets[1].sent[0]), want, `hello after close ${code}`);
    c.stop();
    await run;
  }
});

test('client: the edge asks for a fresh token; it is refreshed and sent in-band', async () => {
  const fs = fakeStack();
  const c = new DanmakuClient({ entryURL: 'http://gslb.test/', room: 'demo', ticket: 't', firstJoinJitterMs: 0, fetch: fs.fetch, WebSocket: fs.FakeWS });
  const run = c.start();
  while (fs.log.sockets.length === 0 || fs.log.sockets[0].sent.length === 0) await new Promise((r) => setTimeout(r, 10));
  const ws = fs.log.sockets[0];
  ws.onmessage({ data: JSON.stringify({ refresh: 'token', exp_ms: 1 }) });
  while (ws.sent.length < 2) await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(JSON.parse(ws.sent[1]), { token: 'tok2' }, 'the refreshed token, in-band');
  assert.equal(fs.log.sockets.length, 1, 'no reconnect');
  assert.equal(c.stats().edgeTokenAsks, 1);
  c.stop();
  await run;
});

test('client: a site-wide broadcast from the edge does not move the resume point', async () => {
  const fs = fakeStack();
  const c = new DanmakuClient({ entryURL: 'http://gslb.test/', room: 'demo', ticket: 't', firstJoinJitterMs: 0, rejoinJitterMs: 0, fetch: fs.fetch, WebSocket: fs.FakeWS });
  const got = [];
  c.addEventListener('message', (e) => got.push(e.detail));
  const run = c.start();
  while (fs.log.sockets.length === 0 || fs.log.sockets[0].sent.length === 0) await new Promise((r) => setTimeout(r, 10));
  const ws = fs.log.sockets[0];
  ws.frame({ v: 1, room: 'demo', m: [{ id: '1000-1', k: 2, u: 'bob', g: 'rose' }, { id: '9000-5', k: 3, x: 'site news', r: 'ops', st: true }] });
  ws.close(CLOSE.RESUME);
  while (fs.log.sockets.length < 2 || fs.log.sockets[1].sent.length === 0) await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(JSON.parse(fs.log.sockets[1].sent[0]), { token: 'tok', last: '1000-1' }, 'last is the room message');
  assert.ok(got.some((m) => m.site && m.text === 'site news'), 'the site message was delivered');
  c.stop();
  await run;
});

test('latency buckets: bounds inclusive, negative in the first, above the last in the extra one', () => {
  assert.deepEqual([latencyBucket(-5), latencyBucket(100), latencyBucket(101), latencyBucket(1250), latencyBucket(10001)],
    [0, 0, 1, 5, LATENCY_BOUNDS_MS.length]);
});

test('client report: segments, first-poll hits and barrage latency since the last report, within the edge bounds', () => {
  let now = 5000;
  const c = new DanmakuClient({ entryURL: 'http://gslb.test', room: 'demo', ticket: 't', now: () => now, fetch: async () => new Response(null, { status: 500 }) });
  const sent = [];
  const ws = { readyState: 1, send: (d) => sent.push(JSON.parse(d)) };
  const lat = (...pairs) => {
    const a = new Array(LATENCY_BOUNDS_MS.length + 1).fill(0);
    for (let i = 0; i < pairs.length; i += 2) a[pairs[i]] = pairs[i + 1];
    return a;
  };
  c._report(ws);
  assert.equal(sent.length, 0, 'nothing to report: nothing sent');
  // Two barrage, 100 ms and 1200 ms after their ids' ms; a gift is not counted.
  c._deliver([msg('4900-0'), msg('3800-0'), gift('4000-0', 'bob', 'rose')]);
  Object.assign(c._stats, { segmentsFetched: 3, firstPollHits: 2 });
  c._report(ws);
  assert.deepEqual(sent, [{ drops: 0, held: 0, segs: 3, hits: 2, lat: lat(0, 1, 5, 1) }]);
  now += 10000;
  c._report(ws);
  assert.equal(sent.length, 1, 'nothing changed: nothing sent');
  // Above the bounds: the rest goes out with the next report.
  Object.assign(c._stats, { segmentsFetched: 3 + 601, firstPollHits: 2 + 601 });
  c._latency[LATENCY_BOUNDS_MS.length] += 10001;
  now += 10000;
  c._report(ws);
  now += 10000;
  c._report(ws);
  assert.deepEqual(sent.slice(1), [
    { drops: 0, held: 0, segs: 600, hits: 600, lat: lat(LATENCY_BOUNDS_MS.length, 10000) },
    { drops: 0, held: 0, segs: 1, hits: 1, lat: lat(LATENCY_BOUNDS_MS.length, 1) },
  ]);
  // A hit whose segment went out in an earlier report waits for the next segment.
  c._reported.hits -= 1;
  now += 10000;
  c._report(ws);
  assert.equal(sent.length, 3, 'a hit alone is not sent');
  c._stats.segmentsFetched += 1;
  now += 10000;
  c._report(ws);
  assert.deepEqual(sent[3], { drops: 0, held: 0, segs: 1, hits: 1 });
});

// ---------------------------------------------------------------- takedowns and reports

test('takedowns: td decodes in segments, frames (m may be nil) and the list; the manifest\'s td is a count', () => {
  const s = decodeSegment(segBytes({ m: [{ id: '5120-0', k: 1, x: 'hi' }], td: [{ id: '4000-3', k: 1 }, { id: '4000-1', k: 2 }] }));
  assert.deepEqual(s.takedowns, [{ id: '4000-3', kind: 1 }, { id: '4000-1', kind: 2 }]);
  assert.deepEqual(decodeSegment(segBytes({})).takedowns, [], 'no td: none (segments before takedowns)');
  const f = decodeFrame(encode({ v: 1, room: 'demo', m: null, td: [{ id: '9-0', k: 1 }] }));
  assert.deepEqual([f.messages, f.takedowns], [[], [{ id: '9-0', kind: 1 }]], 'a frame of takedowns only');
  for (const td of [{ id: '1-0', k: 1 }, [{ id: 'x', k: 1 }], [{ id: '1-0', k: 4 }], [{ id: '1-0' }], ['1-0']]) {
    assert.throws(() => decodeSegment(segBytes({ td })), { code: 'decode' }, JSON.stringify(td));
    assert.throws(() => decodeFrame(encode({ v: 1, room: 'demo', m: [], td })), { code: 'decode' }, JSON.stringify(td));
  }
  assert.deepEqual(toTakedowns(null), []);
  assert.equal(takedownListKey('demo'), 'rooms/demo/takedowns.json');
  assert.deepEqual(decodeTakedownList({ v: 1, room: 'demo', n: 3, ids: [{ id: '1-0', k: 1 }] }, 'demo'), { n: 3, ids: [{ id: '1-0', kind: 1 }] });
  assert.deepEqual(decodeTakedownList({ v: 1, room: 'demo', n: 0, ids: null }, 'demo'), { n: 0, ids: [] });
  assert.throws(() => decodeTakedownList({ v: 1, room: 'other', n: 1, ids: [] }, 'demo'), { code: 'decode' });
  assert.throws(() => decodeTakedownList({ v: 1, room: 'demo', n: -1, ids: [] }, 'demo'), { code: 'decode' });
  assert.throws(() => decodeTakedownList({ v: 1, room: 'demo', n: 1, ids: [{ id: '1-0', k: 1 }, { id: '2-0', k: 1 }] }, 'demo'), { code: 'decode' }, 'more ids than n');
  assert.throws(() => decodeTakedownList({ v: 2, room: 'demo', n: 1, ids: [] }, 'demo'), { code: 'version' });
  assert.throws(() => decodeTakedownList({ v: 1, room: 'demo', n: 1, ids: [{ id: '1-0', k: 0 }] }, 'demo'), { code: 'decode' });
  assert.equal(manifestTakedowns({ v: 2, room: 'demo', td: 4 }), 4);
  assert.equal(manifestTakedowns({ v: 2, room: 'demo' }), 0, 'absent: none');
  assert.equal(manifestTakedowns({ td: 'x' }), 0);
});

test('takedowns: the set forgets the oldest beyond its bound', () => {
  const t = new TakedownSet(2);
  assert.equal(t.add('b/1-0'), true);
  assert.equal(t.add('b/1-0'), false, 'already held');
  t.add('b/2-0');
  t.add('l/3-0');
  assert.deepEqual([t.has('b/1-0'), t.has('b/2-0'), t.has('l/3-0'), t.size], [false, true, true, 2]);
});

test('takedowns: the render queue drops a waiting message by lane and id, a merged gift by any of its ids', () => {
  const q = new RenderQueue({ now: () => 0 });
  q.push(msg('1-0'));
  q.push(msg('2-0'));
  q.push(msg('1-0', KIND_SYSTEM, { text: 'same id, the live lane' }));
  q.push({ ...gift('5-0', 'bob', 'rose', 2), ids: ['4-0', '5-0'] });
  q.push(msg('6-0', KIND_SYSTEM, { site: true }));
  assert.equal(q.remove(KIND_BARRAGE, '1-0'), 1);
  assert.equal(q.remove(KIND_BARRAGE, '1-0'), 0, 'gone already');
  assert.equal(q.remove(KIND_GIFT, '4-0'), 1, 'a merged gift holding the id');
  assert.equal(q.remove(KIND_SYSTEM, '6-0'), 0, 'a site-wide broadcast is not the room\'s');
  assert.equal(q.stats().takenDown, 2);
  const left = [];
  for (let m; (m = q.next());) left.push(`${m.kind}/${m.id}`);
  assert.deepEqual(left, ['3/1-0', '3/6-0', '1/2-0']);
});

test('client: a takedown from the edge drops the queued copy, tells the stage of the shown one, and suppresses later copies', async () => {
  const fs = fakeStack();
  const render = new RenderQueue();
  const c = new DanmakuClient({ entryURL: 'http://gslb.test/', room: 'demo', ticket: 't', firstJoinJitterMs: 0, fetch: fs.fetch, WebSocket: fs.FakeWS, render });
  const got = [], downs = [];
  c.addEventListener('message', (e) => got.push(e.detail.id));
  c.addEventListener('takedown', (e) => downs.push(e.detail));
  const run = c.start();
  while (fs.log.sockets.length === 0 || fs.log.sockets[0].sent.length === 0) await new Promise((r) => setTimeout(r, 10));
  const ws = fs.log.sockets[0];
  ws.frame({ v: 1, room: 'demo', m: [{ id: '2000-0', k: 1, x: 'shown' }, { id: '2000-1', k: 1, x: 'waiting' }, { id: '2000-2', k: 1, x: 'kept' }] });
  assert.equal(render.next().id, '2000-0', 'on the stage');
  assert.equal(render.length, 2);
  ws.frame({ v: 1, room: 'demo', m: null, td: [{ id: '2000-0', k: 1 }, { id: '2000-1', k: 1 }, { id: '2000-1', k: 1 }] });
  assert.deepEqual(downs, [
    { id: '2000-0', kind: 1, via: 'edge', dequeued: false },
    { id: '2000-1', kind: 1, via: 'edge', dequeued: true },
  ], 'one event per takedown: the shown one is the stage\'s to remove');
  assert.deepEqual([render.length, render.next().id], [1, '2000-2']);
  // Later copies (a segment after the edge; another edge connection's
  // replay): never delivered. Their seen-set entry may be gone by then.
  c._seen = new (c._seen.constructor)();
  ws.frame({ v: 1, room: 'demo', m: [{ id: '2000-0', k: 1, x: 'shown' }, { id: '2000-1', k: 1, x: 'waiting' }, { id: '2000-3', k: 1 }] });
  assert.deepEqual(got.slice(0, 4), ['2000-0', '2000-1', '2000-2', '2000-3']);
  assert.ok(c.takenDown('2000-1') && !c.takenDown('2000-1', KIND_GIFT) && !c.takenDown('2000-2'));
  // A merged gift: delivered without the ids taken down, its count cut.
  ws.frame({ v: 1, room: 'demo', td: [{ id: '3000-0', k: 2 }], m: [{ id: '3000-0', k: 2, u: 'bob', g: 'rose', c: 3, ids: ['3000-0', '3000-1', '3000-2'] }] });
  const g = render.next();
  assert.deepEqual([g.id, g.count, g.ids], ['3000-1', 2, ['3000-1', '3000-2']]);
  ws.frame({ v: 1, room: 'demo', td: [{ id: '3000-1', k: 2 }, { id: '3000-2', k: 2 }], m: [{ id: '3000-0', k: 2, u: 'bob', g: 'rose', c: 3, ids: ['3000-0', '3000-1', '3000-2'] }] });
  assert.equal(render.priority.length, 0, 'every id of the merged gift taken down: not delivered');
  const st = c.stats();
  assert.deepEqual([st.takedownsApplied, st.takedownsDequeued, st.takedownsSuppressed, st.render.takenDown], [5, 1, 3, 1]);
  c.stop();
  await run;
});

test('client: the manifest\'s td above what it holds fetches takedowns.json; listed and segment-td messages are never shown', async () => {
  const fs = fakeStack();
  const asked = { list: 0, manifest: 0 };
  let segN = 0;
  const fetch = async (url, init) => {
    if (url.endsWith('/live.json')) {
      asked.manifest++;
      return new Response(JSON.stringify({ v: 2, room: 'demo', t: 1, seq: 1, dur: 250, ms: 1000, td: 2 }));
    }
    if (url === 'http://cdn.test/rooms/demo/takedowns.json') {
      asked.list++;
      return new Response(JSON.stringify({ v: 1, room: 'demo', n: 2, ids: [{ id: '1000-0', k: 2 }, { id: '900-0', k: 1 }] }));
    }
    const r = await fs.fetch(url, init);
    if (r.status !== 200 || !url.endsWith('.msgpack')) return r;
    const seg = decodeSegment(new Uint8Array(await r.arrayBuffer()));
    // Segment 1: the listed gift 1000-0 and barrage 900-0 (written before
    // their takedowns) and
    // 901-0, which segment 2's td takes down after it was delivered; then
    // 902-0 again (a copy), taken down in the same segment that carries it.
    const m = [[{ id: '1000-0', k: 2, u: 'bob', g: 'rose' }, { id: '900-0', k: 1 }, { id: '901-0', k: 1 }], [{ id: '902-0', k: 1 }], []][Math.min(segN, 2)];
    const td = [[], [{ id: '901-0', k: 1 }, { id: '902-0', k: 1 }], []][Math.min(segN, 2)];
    segN++;
    return new Response(encode({ v: 2, room: 'demo', t: seg.t, seq: seg.seq, dur: 250, ms: seg.ms, m: [...m], td }));
  };
  const render = new RenderQueue();
  const c = new DanmakuClient({ entryURL: 'http://gslb.test/', room: 'demo', ticket: 't', firstJoinJitterMs: 0, fetch, noEdge: true, render });
  const got = [], downs = [];
  c.addEventListener('message', (e) => got.push(e.detail.id));
  c.addEventListener('takedown', (e) => downs.push(`${e.detail.via}:${e.detail.id}`));
  const segs = [];
  c.addEventListener('segment', (e) => segs.push(e.detail.slot));
  const run = c.start();
  while (asked.list === 0) await new Promise((r) => setTimeout(r, 10));
  fs.log.ready = true;
  while (segs.length < 3) await new Promise((r) => setTimeout(r, 20));
  c.stop();
  await run;
  assert.equal(asked.list, 1, 'the list once: the next manifest names no more than it holds');
  assert.deepEqual(got, ['901-0'], 'the listed gift and barrage and the segment-td copy never delivered');
  assert.deepEqual(downs, ['list:1000-0', 'list:900-0', 'segment:901-0', 'segment:902-0']);
  assert.equal(render.length, 0, '901-0 left the queue');
  const st = c.stats();
  assert.deepEqual([st.takedownsApplied, st.takedownsSuppressed, st.takedownListFetches, st.takedownListErrors], [4, 3, 1, 0]);
});

test('client: a takedown list that is missing or malformed is counted and asked for again by the next manifest', async () => {
  const c = new DanmakuClient({ entryURL: 'http://gslb.test/', room: 'demo', ticket: 't', fetch: async (url) => {
    if (url.endsWith('takedowns.json')) return answers.shift();
    return new Response(null, { status: 404 });
  } });
  const answers = [new Response(null, { status: 404 }), new Response('{"v":1,"room":"demo","n":1,"ids":[{"id":"x","k":1}]}'),
    new Response('{"v":1,"room":"demo","n":1,"ids":[{"id":"7-0","k":1}]}')];
  c._session = { entry: { cdn: 'http://cdn.test/' } };
  for (let i = 0; i < 3; i++) {
    c._noteTakedownCount(1);
    await c._listFetch;
  }
  c._noteTakedownCount(1);
  assert.equal(c._listFetch, null, 'holding n=1: no fetch');
  const st = c.stats();
  assert.deepEqual([st.takedownListFetches, st.takedownListErrors, st.takedownsApplied, c.takenDown('7-0')], [3, 2, 1, true]);
});

test('report: posts {id, k, reason} with the viewer\'s token; duplicate, report_rate and bad_report are coded', async () => {
  const answers = [
    [202, { ok: true }], [200, { ok: true, duplicate: true }],
    [429, { error: { code: 'report_rate', message: 'slow down' } }, { 'Retry-After': '3' }],
    [400, { error: { code: 'bad_report', message: 'reason' } }],
  ];
  const posts = [];
  const fetch = async (url, init = {}) => {
    const now = Date.now();
    if (url.includes('/v1/entry')) {
      return new Response(JSON.stringify({ room: 'demo', role: 'viewer', token: 'tok', cdn: 'http://cdn.test/', server_time_ms: now, token_expires_ms: now + 600e3, segment_ms: 1000, publish_delay_ms: 50, edge: [], ingest: NODES }));
    }
    if (!init.method) return new Response(null, { status: 404 });
    posts.push({ url, auth: init.headers.Authorization, body: JSON.parse(init.body) });
    const [status, body, headers] = answers.shift();
    return new Response(JSON.stringify(body), { status, headers });
  };
  const c = new DanmakuClient({ entryURL: 'http://gslb.test', room: 'demo', ticket: 't', firstJoinJitterMs: 0, fetch, noEdge: true });
  await assert.rejects(c.report('1-0', 1, 'spam'), { code: 'not_joined' });
  const events = [];
  c.addEventListener('reported', (e) => events.push(e.detail));
  const run = c.start();
  await new Promise((r) => c.addEventListener('entry', r, { once: true }));
  assert.deepEqual(await c.report('1700000000000-4', KIND_BARRAGE, 'spam'), { ok: true, duplicate: false });
  assert.deepEqual(await c.report('1700000000000-4', KIND_BARRAGE, 'spam'), { ok: true, duplicate: true });
  await assert.rejects(c.report('1700000000000-5', KIND_BARRAGE, 'abuse'), { code: 'report_rate', status: 429, retryAfterMs: 3000 });
  await assert.rejects(c.report('1700000000000-5', KIND_GIFT, 'other'), { code: 'bad_report', status: 400 });
  for (const [id, kind, reason] of [['x', 1, 'spam'], ['1-0', 4, 'spam'], ['1-0', 1, 'boring']]) {
    await assert.rejects(c.report(id, kind, reason), { code: 'bad_report' }, `${id} ${kind} ${reason}`);
  }
  assert.equal(posts.length, 4, 'refused here before any request; a 429 is not tried on another node');
  assert.deepEqual(posts[0], { url: 'http://primary.test/v1/rooms/demo/reports', auth: 'Bearer tok', body: { id: '1700000000000-4', k: 1, reason: 'spam' } });
  assert.deepEqual(REPORT_REASONS, ['spam', 'abuse', 'illegal', 'other']);
  assert.deepEqual(events.map((e) => e.ok && (e.duplicate ? 'dup' : 'ok') || e.error.code), ['ok', 'dup', 'report_rate', 'bad_report']);
  const st = c.stats();
  assert.deepEqual([st.reportsFiled, st.reportsDuplicate, st.reportsFailed], [1, 1, 2]);
  c.stop();
  await run;
});

test('takedown: a host posts it to the admin API with its token and it applies here at once', async () => {
  const posts = [];
  const fetch = async (url, init = {}) => {
    const now = Date.now();
    if (url.includes('/v1/entry')) {
      return new Response(JSON.stringify({ room: 'demo', role: 'host', token: 'htok', cdn: 'http://cdn.test/', server_time_ms: now, token_expires_ms: now + 600e3, segment_ms: 1000, publish_delay_ms: 50, edge: [], ingest: ['http://ingest.test/'] }));
    }
    if (!init.method) return new Response(null, { status: 404 });
    posts.push({ url, auth: init.headers.Authorization, body: JSON.parse(init.body) });
    if (posts.length === 2) return new Response(JSON.stringify({ error: { code: 'forbidden', message: 'not a host of this room' } }), { status: 403 });
    return new Response(JSON.stringify({ takedown: { id: '1-0', k: 1, by: 'h', reason: 'r', at_ms: 5 } }), { status: 201 });
  };
  const render = new RenderQueue();
  render.push(msg('1-0'));
  const c = new DanmakuClient({ entryURL: 'http://gslb.test', room: 'demo', ticket: 't', firstJoinJitterMs: 0, fetch, noEdge: true, render });
  const run = c.start();
  await new Promise((r) => c.addEventListener('entry', r, { once: true }));
  assert.equal((await c.takedown('1-0', KIND_BARRAGE, 'r')).takedown.by, 'h');
  assert.deepEqual(posts[0], { url: 'http://ingest.test/v1/admin/rooms/demo/takedowns', auth: 'Bearer htok', body: { id: '1-0', k: 1, reason: 'r' } });
  assert.equal(render.length, 0);
  await assert.rejects(c.takedown('2-0', KIND_BARRAGE, ''), { code: 'forbidden', status: 403 });
  assert.equal(c.takenDown('2-0'), false, 'a refused takedown is not applied');
  await assert.rejects(c.takedown('nope'), { code: 'bad_takedown' });
  assert.equal(posts.length, 2);
  c.stop();
  await run;
});

// ---------------------------------------------------------------- playhead

// A fake playhead and local clock the test moves by hand.
function fakePlayhead(ph = 100000) {
  const f = { ph, local: 0 };
  f.clock = () => f.ph;
  f.play = (ms) => { f.ph += ms; f.local += ms; };
  return f;
}
const atP = (id, p, kind = KIND_BARRAGE, extra = {}) => msg(id, kind, { playheadMs: p, ...extra });

test('playhead: a message is placed at p, else at its id\'s millisecond; the clock is read safely', () => {
  assert.equal(playheadOf(atP('5000-0', 4100)), 4100);
  assert.equal(playheadOf(msg('5000-0')), 5000, 'no p (an old client, a gift): its id');
  assert.equal(readPlayhead(() => 1234.5), 1234.5);
  assert.equal(readPlayhead(() => new Date(99)), 99);
  for (const v of [null, undefined, NaN, 0, -1, '5', Infinity]) assert.equal(readPlayhead(() => v), null, String(v));
  assert.equal(readPlayhead(() => { throw new Error('no player'); }), null);
});

test('hold: held until the playhead reaches p, in playhead order; late arrivals at once, counted', () => {
  const f = fakePlayhead(100000), q = new HoldQueue();
  q.push(atP('101000-0', 100500));
  q.push(atP('101000-1', 100200));
  q.push(msg('99000-0', KIND_GIFT, { gift: 'rose' })); // a gift without p, its id behind the playhead
  assert.deepEqual(q.release(f.ph, true, f.local).map((m) => m.id), ['99000-0'], 'the gift\'s moment has passed');
  f.play(199);
  assert.deepEqual(q.release(f.ph, true, f.local), [], 'not a millisecond early');
  f.play(1);
  assert.deepEqual(q.release(f.ph, true, f.local).map((m) => m.id), ['101000-1']);
  assert.equal(q.next(), 100500);
  f.play(310);
  assert.deepEqual(q.release(f.ph, true, f.local).map((m) => m.id), ['101000-0']);
  const st = q.stats();
  assert.equal(st.mode, 'playhead');
  assert.deepEqual([st.received, st.shown, st.late, st.lateMsMax, st.held], [3, 3, 1, 1000, 0]);
  assert.deepEqual([st.skewP50Ms, st.skewMaxMs], [10, 1000], 'skews 1000 (late), 0 and 10 ms');
  assert.equal(q.skew.reported.reduce((a, b) => a + b), 3, 'in the report\'s buckets too');
});

test('hold: a seek forward shows what is due but skips barrage far behind (gifts and system kept); back and stall hold again', () => {
  const f = fakePlayhead(100000), q = new HoldQueue();
  q.release(f.ph, true, f.local);
  q.push(atP('100000-1', 101000));
  q.push(atP('100000-2', 109000));
  q.push(atP('100000-3', 101500, KIND_GIFT, { gift: 'rose' }));
  q.push(atP('100000-4', 101600, KIND_SYSTEM));
  f.ph += 10000; // a seek 10 s forward, no local time passed
  f.local += 20;
  const out = q.release(f.ph, true, f.local);
  assert.deepEqual(out.map((m) => m.id), ['100000-3', '100000-4', '100000-2'], 'barrage 9 s behind skipped, gifts and system shown, 1 s behind shown');
  let st = q.stats();
  assert.deepEqual([st.jumps, st.skipped], [1, 1]);
  // Back 30 s: nothing re-shown, what is held waits for the playhead again.
  q.push(atP('100000-5', 95000));
  f.ph -= 30000;
  f.local += 20;
  assert.deepEqual(q.release(f.ph, true, f.local), []);
  assert.equal(q.stats().jumps, 2);
  f.play(14999);
  assert.deepEqual(q.release(f.ph, true, f.local), [], 'held again until the playhead reaches it');
  f.play(1);
  assert.deepEqual(q.release(f.ph, true, f.local).map((m) => m.id), ['100000-5']);
  // A stall: local time runs, the playhead does not.
  q.push(atP('100000-6', f.ph + 500));
  f.local += 5000;
  assert.deepEqual(q.release(f.ph, true, f.local), [], 'a stalled video shows nothing new');
  st = q.stats();
  assert.deepEqual([st.jumps, st.held, st.skipped], [3, 1, 1]);
  f.play(500);
  assert.deepEqual(q.release(f.ph, true, f.local).map((m) => m.id), ['100000-6']);
  assert.equal(q.stats().late, 3, 'late: what the seek forward jumped past and showed; nothing since');
});

test('hold: no playhead or no sync falls back to the wall clock; the hold is bounded, gifts never dropped; takedowns remove', () => {
  const f = fakePlayhead(100000), q = new HoldQueue({ maxBarrage: 2 });
  q.push(atP('1-0', 200000));
  q.push(atP('1-1', 200001, KIND_GIFT, { gift: 'rose' }));
  assert.deepEqual(q.release(f.ph, true, f.local), []);
  assert.deepEqual(q.release(null, true, f.local).map((m) => m.id), ['1-0', '1-1'], 'the clock lost: all at once');
  assert.equal(q.stats().mode, 'wall');
  q.release(null, true, f.local);
  assert.equal(q.stats().fallbacks, 1, 'one switch, counted once');
  q.release(f.ph, true, f.local);
  q.push(atP('2-0', 300000));
  assert.deepEqual(q.release(f.ph, false, f.local).map((m) => m.id), ['2-0'], 'the entry allows no sync');
  assert.equal(q.stats().fallbacks, 2);
  // Back in sync: the bound.
  q.release(f.ph, true, f.local);
  q.push(atP('3-0', 300000, KIND_GIFT, { gift: 'rose' }));
  q.push(atP('3-1', 300001));
  q.push(atP('3-2', 300002));
  const early = q.push(atP('3-3', 300003));
  assert.deepEqual(early.map((m) => m.id), ['3-0', '3-1'], 'the earliest barrage early, and the gift before it with it');
  assert.equal(q.stats().early, 1);
  q.push(atP('4-0', 300010, KIND_GIFT, { gift: 'rose', ids: ['4-0', '4-1'], count: 2 }));
  assert.equal(q.remove(KIND_BARRAGE, '3-2'), 1);
  assert.equal(q.remove(KIND_GIFT, '4-1'), 1, 'a merged gift by any of its ids');
  assert.equal(q.remove(KIND_GIFT, '3-3'), 0, 'the lane matters');
  f.ph = 400000;
  assert.deepEqual(q.release(f.ph, true, f.local + 300000).map((m) => m.id), ['3-3']);
});

test('client with a playhead: held to the playhead, sync from the entry, skew reported, stats().playhead', () => {
  let now = 5000;
  const f = fakePlayhead(100000);
  const render = new RenderQueue();
  const c = new DanmakuClient({ entryURL: 'http://gslb.test', room: 'demo', ticket: 't', now: () => now, playhead: f.clock, render, fetch: async () => new Response(null, { status: 500 }) });
  assert.throws(() => new DanmakuClient({ entryURL: 'http://gslb.test', room: 'demo', ticket: 't', playhead: 5 }), { code: 'config' });
  assert.equal(new DanmakuClient({ entryURL: 'http://gslb.test', room: 'demo', ticket: 't' }).stats().playhead.mode, 'off');
  c._session = { entry: { sync: true }, offsetMs: 0 };
  const got = [];
  c.addEventListener('message', (e) => got.push(e.detail.id));
  c._deliver([atP('4990-0', 100300), atP('4990-1', 99000), msg('4000-0', KIND_GIFT, { gift: 'rose' })]);
  c._holdRelease();
  assert.deepEqual(got, ['4000-0', '4990-1'], 'the gift (id ms far behind) and the late one at once');
  assert.equal(render.length, 2, 'the render queue gets what is released, not what is held');
  now += 300;
  f.play(300);
  c._holdRelease();
  assert.deepEqual(got, ['4000-0', '4990-1', '4990-0']);
  const st = c.stats().playhead;
  assert.deepEqual([st.mode, st.received, st.shown, st.held, st.late, st.lateMsMax], ['playhead', 3, 3, 0, 2, 96000], 'the gift\'s id is 96 s behind the playhead');
  // The skew goes to the edge in the latency buckets, once.
  const sent = [];
  const ws = { readyState: 1, send: (d) => sent.push(JSON.parse(d)) };
  c._report(ws);
  const skew = new Array(LATENCY_BOUNDS_MS.length + 1).fill(0);
  skew[0] = 1; // 0 ms
  skew[skew.length - 1] = 1; // 96 s
  skew[latencyBucket(1000)] = 1; // 1 s
  assert.deepEqual(sent[0].skew, skew);
  now += 10000;
  c._report(ws);
  assert.equal(sent.length, 1, 'nothing new: no report');
  // The entry says no sync (the gslb steers this client to the wall clock).
  c._session.entry.sync = false;
  c._deliver([atP('5000-0', 200000)]);
  c._holdRelease();
  assert.equal(got.at(-1), '5000-0');
  assert.deepEqual([c.stats().playhead.mode, c.stats().playhead.fallbacks], ['wall', 1]);
});

test('client with a playhead: the poller starts at the playhead less 2 s, and the comment carries playhead_ms', async () => {
  const fs = fakeStack();
  let behind = 12000;
  const c = new DanmakuClient({ entryURL: 'http://gslb.test/', room: 'demo', ticket: 't', firstJoinJitterMs: 0, fetch: fs.fetch, WebSocket: fs.FakeWS, sendIntervalMs: 0, playhead: () => fs.server() - behind });
  const run = c.start();
  await new Promise((r) => c.addEventListener('entry', r, { once: true }));
  c.send('goal');
  behind = 200e3; // held back past the ingest's bound: sent without one
  c.send('late goal');
  while (fs.log.posts.length < 2 || fs.log.asked.size === 0) await new Promise((r) => setTimeout(r, 10));
  c.stop();
  await run;
  const [p0, p1] = fs.log.posts.map((p) => JSON.parse(p.body));
  assert.equal(p0.text, 'goal');
  assert.ok(Math.abs(p0.playhead_ms - (fs.server() - 12000)) < 5000 && Number.isInteger(p0.playhead_ms), JSON.stringify(p0));
  assert.deepEqual(p1, { text: 'late goal' });
  const first = Math.min(...fs.log.asked);
  assert.ok(first * fs.D <= fs.server() - 13000, 'the segments since the playhead (less 2 s) are read: the CDN holds them');
});

test('replay: plays recorded segments at the playhead, follows seeks both ways, honours takedowns', async () => {
  const D = 1000, base = 1700000000000;
  // A recorded room: one comment a second, each stored 3 s after its moment
  // (p), a gift without p, and a takedown in the list and in a segment.
  const segs = new Map();
  for (let i = 0; i < 60; i++) {
    const at = base + i * D;
    const m = [{ id: `${at + 3000}-0`, k: 1, x: `c${i}`, p: at + 500 }];
    if (i === 10) m.push({ id: `${at}-0`, k: 2, g: 'rose' });
    segs.set(`rooms/rp/s/${(at + 3000) / 1000}.msgpack`, { v: 1, room: 'rp', t: (at + 3000) / 1000, seq: i, dur: D, m, td: i === 20 ? [{ id: `${base + 25 * D + 3000}-0`, k: 1 }] : undefined });
  }
  const list = { v: 1, room: 'rp', n: 1, ids: [{ id: `${base + 5 * D + 3000}-0`, k: 1 }] };
  const fetch = async (url) => {
    const key = url.replace('http://cdn.test/', '');
    if (key === 'rooms/rp/live.json') return new Response(JSON.stringify({ v: 1, room: 'rp', t: base / 1000 + 70, seq: 60, dur: D, td: 1, ended: true }));
    if (key === 'rooms/rp/takedowns.json') return new Response(JSON.stringify(list));
    const s = segs.get(key);
    return s ? new Response(encode(s)) : new Response(null, { status: 404 });
  };
  const f = fakePlayhead(base);
  const r = new DanmakuReplay({ cdnURL: 'http://cdn.test', room: 'rp', playhead: f.clock, now: () => f.local, fetch });
  const got = [], downs = [];
  r.addEventListener('message', (e) => got.push(e.detail.text || e.detail.gift));
  r.addEventListener('takedown', (e) => downs.push(e.detail.id));
  r._loop = () => {}; // the test steps by hand
  await r.start();
  const step = async () => {
    r._step();
    while (r._loading) await r._loading;
    r._step();
  };
  // A seek: the playhead moves to base + ms at once, and is played for each of plays ms.
  const seekTo = async (ms, ...plays) => {
    got.length = 0;
    f.ph = base + ms;
    f.local += 20;
    await step();
    for (const d of plays) {
      f.play(d);
      await step();
    }
  };
  await step(); // the list
  await step();
  assert.equal(r.stats().segmentMs, 1000, 'the manifest\'s duration');
  assert.deepEqual(got, [], 'nothing before its moment');
  f.play(500);
  await step();
  assert.deepEqual(got, ['c0'], 'c0 at base+500, read from the segment 3 s later');
  for (let i = 0; i < 12; i++) {
    f.play(1000);
    await step();
  }
  assert.deepEqual(got, ['c0', 'c1', 'c2', 'c3', 'c4', 'c6', 'c7', 'c8', 'c9', 'rose', 'c10', 'c11', 'c12'], 'c5 is on the takedown list');
  // Seek back to base+8 s: what lies after it plays again.
  await seekTo(8000, 1600);
  assert.deepEqual(got, ['c8', 'c9'], 'the gift at base+10 s is not due yet');
  f.play(900);
  await step();
  assert.deepEqual(got, ['c8', 'c9', 'rose', 'c10']);
  // Seek forward to base+30 s: the 20 s jumped over are not poured out.
  await seekTo(30000, 1000);
  assert.deepEqual(got, ['c30']);
  assert.ok(downs.includes(`${base + 25 * D + 3000}-0`), 'a segment\'s td applies');
  // Back to base+24 s: c25, taken down by a segment's td, never plays.
  await seekTo(24000, 1000, 1000, 1000);
  assert.deepEqual(got, ['c24', 'c26']);
  const st = r.stats();
  assert.equal(st.seeks, 3);
  assert.equal(st.playhead.mode, 'playhead');
  // The test's playhead moves a second or more a step: that is the skew here.
  assert.ok(st.playhead.skewMaxMs <= 1600 && st.playhead.skewP50Ms >= 0, JSON.stringify(st.playhead));
  assert.throws(() => new DanmakuReplay({ cdnURL: 'x', room: 'rp' }), { code: 'config' });
  r.stop();
});

test('client with a playhead: the far-behind jump goes no further than the playhead less 2 s', async () => {
  const now = 1_000_000;
  let ph = now - 12000;
  const c = new DanmakuClient({ entryURL: 'http://gslb.test', room: 'demo', ticket: 't', now: () => now, playhead: () => ph, fetch: async () => new Response(null, { status: 500 }) });
  c._session = { entry: { sync: true }, offsetMs: 0, marginMs: 0, publishDelayMs: 0 };
  c._manifest = async () => ({ v: 2, room: 'demo', t: Math.floor(now / 1000) - 1, seq: 900, dur: 1000, ms: now - 2000 });
  const p = { D: 1000, slot: (now - 60000) / 1000, catchUpMs: 0, seq: 0, haveSeq: false };
  assert.equal(await c._maybeJump(p), true);
  assert.equal(p.slot, (now - 14000) / 1000, 'to the playhead less 2 s, not to live: what is stored after it is due ahead of the video');
  assert.equal(await c._maybeJump(p), false, 'and no further while the playhead stays');
  ph = null; // wall-clock mode: to live, as without a playhead
  assert.equal(await c._maybeJump(p), true);
  assert.equal(p.slot, (now - 2000) / 1000);
});
