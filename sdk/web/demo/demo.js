// The demo page of `danmaku dev` (served at the gslb's "/"): one viewer in
// ?room= (default "demo") as ?user= (default a random guest), with a dev
// ticket from /v1/dev/ticket (?role= asks for another role), or the ticket
// in the fragment (#ticket=…: never sent to a server, so never in a log).
// Click a comment to report it; a host or admin of the room may take it
// down. window.danmakuDemo exposes the client, the render queue and the
// stage's counters for tests.
import { DanmakuClient, RenderQueue, watchVisibility, KIND_BARRAGE, KIND_GIFT, KIND_SYSTEM } from '../danmaku.js';

const DISPLAY_MS = 8000; // one crossing of the stage = how long a comment holds its render slot
const FADE_MS = 250; // a comment taken down fades out this fast
const VISIBLE = 32;
const GAP_PX = 24; // least distance between two comments on a track
const MAX_GIFTS = 4; // toasts shown at once
// Comments are taken from the render queue at most VISIBLE per DISPLAY_MS on
// average (a burst of PACE_BURST): a full buffer would otherwise refill all
// 32 slots in one frame, and they would cross the stage as one wave every
// 8 s instead of as a steady stream.
const PACE_PER_MS = VISIBLE / DISPLAY_MS, PACE_BURST = 8;

const params = new URLSearchParams(location.search);
const room = params.get('room') || 'demo';
const user = params.get('user') || `guest-${Math.random().toString(36).slice(2, 7)}`;
const $ = (id) => document.getElementById(id);
$('room').textContent = room;
$('user').textContent = user;

const queue = new RenderQueue({ visible: VISIBLE, displayMs: DISPLAY_MS });
// The comment clicked last: {id, kind, text, el}. A click on a comment picks
// it; the report form then reports it (or, for a host, takes it down).
let selected = null;
watchVisibility(queue);

// ---------------------------------------------------------------- stage

// Comments scroll right to left on tracks. Each comment's width is measured
// once (after its text is set, in a batch, so a frame lays out at most once);
// everything after that is a transform animation, which the compositor runs.
const stage = {
  el: $('stage'), layer: $('comments'),
  W: 0, H: 0, lineH: 32, tracks: [], // per track: the last comment {start, speed, width}
  pool: [], active: new Set(), waiting: [], maxOnStage: 0, removed: 0,

  resize(w, h) {
    this.W = w;
    this.H = h;
    const n = Math.max(1, Math.floor((h * 0.75) / this.lineH)); // the bottom quarter is the gift strip's
    this.tracks.length = n;
  },

  take() {
    let el = this.pool.pop();
    if (!el) {
      el = document.createElement('div');
      el.className = 'comment';
      this.layer.append(el);
    }
    return el;
  },

  // A comment of width w may start on a track at time t when the previous
  // one there has cleared GAP_PX of the right edge, and, if the new one is
  // faster (wider: every comment crosses in DISPLAY_MS), it cannot catch the
  // previous one before that one has left the stage.
  fits(last, t, w) {
    if (!last) return true;
    if (last.speed * (t - last.start) < last.width + GAP_PX) return false;
    const v = (this.W + w) / DISPLAY_MS;
    return v <= last.speed || t + (this.W - GAP_PX) / v >= last.start + DISPLAY_MS;
  },

  // Puts item on a random track it fits on (the top one each time would
  // leave the lower half of the stage empty at a calm rate).
  launch(item, t) {
    const free = [];
    for (let i = 0; i < this.tracks.length; i++) if (this.fits(this.tracks[i], t, item.w)) free.push(i);
    if (free.length === 0) return false;
    const track = free[Math.floor(Math.random() * free.length)];
    const { el, w } = item;
    const y = track * this.lineH;
    this.tracks[track] = { start: t, speed: (this.W + w) / DISPLAY_MS, width: w };
    el.dataset.on = '';
    el.anim = el.animate(
      [{ transform: `translate(${this.W}px, ${y}px)` }, { transform: `translate(${-w}px, ${y}px)` }],
      { duration: DISPLAY_MS, easing: 'linear' });
    el.anim.onfinish = () => this.recycle(el);
    this.active.add(el);
    this.maxOnStage = Math.max(this.maxOnStage, this.active.size);
    return true;
  },

  // A takedown: the comment leaves the stage (a short fade) or the line of
  // those waiting for a track.
  takeDown(id) {
    for (const el of this.active) {
      if (el.dataset.id !== id || el.fading) continue;
      this.removed++;
      el.fading = el.animate([{ opacity: 1 }, { opacity: 0 }], { duration: FADE_MS, fill: 'forwards' });
      el.fading.onfinish = () => this.recycle(el);
    }
    const i = this.waiting.findIndex((it) => it.m.id === id);
    if (i >= 0) {
      this.removed++;
      this.pool.push(this.waiting.splice(i, 1)[0].el);
    }
  },

  recycle(el) {
    el.fading?.cancel();
    el.fading = null;
    if (selected?.el === el) selected.el = null;
    el.anim?.cancel();
    el.anim = null;
    delete el.dataset.on;
    this.active.delete(el);
    this.pool.push(el);
  },

  clear() {
    for (const el of [...this.active]) this.recycle(el);
    for (const it of this.waiting) this.pool.push(it.el);
    this.waiting.length = 0;
    this.tracks.fill(undefined);
  },
};

// A background tab runs no animation frames: empty the stage on the event.
document.addEventListener('visibilitychange', () => { if (document.hidden) stage.clear(); });

// Track count and speed follow the stage's size; the observer hands the size
// over, so nothing reads layout for it.
new ResizeObserver(([e]) => stage.resize(e.contentRect.width, e.contentRect.height)).observe(stage.el);
{
  // One comment's line height, read once.
  const probe = stage.take();
  probe.textContent = 'M';
  stage.lineH = probe.offsetHeight || 32;
  stage.pool.push(probe);
  stage.resize(stage.el.clientWidth, stage.el.clientHeight);
}

// ---------------------------------------------------------------- gifts and announcements

const gifts = { el: $('gifts'), pool: [], shown: [] };

function showGift(m) {
  const li = gifts.pool.pop() ?? Object.assign(document.createElement('li'), { className: 'gift' });
  li.dataset.id = m.id;
  li.replaceChildren(`🎁 ${m.nick || m.user || 'several viewers'} sent ${m.gift}`,
    Object.assign(document.createElement('span'), { className: 'count', textContent: `×${m.count}` }),
    Object.assign(document.createElement('span'), { className: 'via', textContent: m.collapsed ? `${m.collapsed} gifts while away` : `via ${m.via}` }));
  gifts.el.append(li);
  while (gifts.el.children.length > MAX_GIFTS) gifts.el.firstElementChild.remove();
  gifts.shown.push({ id: m.id, user: m.user, gift: m.gift, count: m.count, via: m.via });
  if (gifts.shown.length > 1000) gifts.shown.shift(); // for tests: the recent ones
  const anim = li.animate([{ transform: 'translateX(-30px)', opacity: 0 }, { transform: 'none', opacity: 1, offset: 0.05 },
    { opacity: 1, offset: 0.85 }, { opacity: 0 }], { duration: DISPLAY_MS / 2, fill: 'forwards' });
  anim.onfinish = () => { anim.cancel(); li.remove(); gifts.pool.push(li); };
}

function showSystem(m) {
  const el = $('system');
  el.dataset.id = m.id;
  el.textContent = `📢 ${m.text}`;
  el.dataset.on = '';
  clearTimeout(showSystem.timer);
  showSystem.timer = setTimeout(() => delete el.dataset.on, DISPLAY_MS / 2);
}

// ---------------------------------------------------------------- the frame loop

const badge = { el: $('newbadge'), text: '' };
const pace = { tokens: PACE_BURST, at: performance.now() };

function frame(t) {
  requestAnimationFrame(frame);
  // The DOM is written only when something changes: a write, even of the
  // same value, may cost a style pass in every frame.
  const text = queue.hidden ? `${queue.newCount} new` : '';
  if (text !== badge.text) {
    badge.el.hidden = !text;
    badge.el.textContent = badge.text = text;
  }
  if (queue.hidden) {
    // Hidden (another tab, or emulated): the screen is empty and nothing is
    // added; the badge counts what arrived.
    if (stage.active.size || stage.waiting.length) stage.clear();
    return;
  }
  // Comments taken but not yet launched count against the 32 as well. Each
  // starts at its offset into the second it was sent in, so that a
  // segment's comments spread over a second instead of starting as one
  // column; one waiting for a free track holds the ones behind it.
  pace.tokens = Math.min(PACE_BURST, pace.tokens + (t - pace.at) * PACE_PER_MS);
  pace.at = t;
  const fresh = [];
  while (pace.tokens >= 1 && stage.active.size + stage.waiting.length + fresh.length < VISIBLE) {
    const m = queue.next();
    if (!m) break;
    pace.tokens--;
    if (m.kind === KIND_BARRAGE) fresh.push({ m, el: stage.take(), at: t + m.offset });
    else if (m.kind === KIND_GIFT) showGift(m);
    else showSystem(m);
  }
  for (const it of fresh) {
    it.el.textContent = it.m.text;
    it.el.dataset.id = it.m.id;
    it.el.classList.toggle('mine', it.m.user === user);
  }
  for (const it of fresh) it.w = it.el.offsetWidth; // one layout for the batch
  stage.waiting.push(...fresh);
  while (stage.waiting.length && stage.waiting[0].at <= t && stage.launch(stage.waiting[0], t)) stage.waiting.shift();
}

// ---------------------------------------------------------------- client

let client = null, stopped = false;
const rate = { second: 0, n: 0, last: 0 }; // messages delivered per second

async function devTicket() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get('ticket')) return fragment.get('ticket');
  const q = new URLSearchParams({ user, nick: user.slice(0, 6), ...(params.get('role') ? { role: params.get('role') } : {}) });
  const r = await fetch(`/v1/dev/ticket?${q}`);
  if (!r.ok) throw new Error(`dev ticket: HTTP ${r.status} (is this \`danmaku dev\`?)`);
  return (await r.json()).ticket;
}

async function main() {
  client = new DanmakuClient({
    entryURL: location.origin, room, ticket: await devTicket(), render: queue,
    firstJoinJitterMs: Number(params.get('jitter') ?? 0), // one viewer opening a page: no need to wait
    ...(params.has('report') ? { reportIntervalMs: Number(params.get('report')) } : {}), // the browser test's: every second
  });
  window.danmakuDemo.client = client;
  client.addEventListener('message', () => {
    const s = Math.floor(performance.now() / 1000);
    if (s !== rate.second) Object.assign(rate, { last: s === rate.second + 1 ? rate.n : 0, second: s, n: 0 });
    rate.n++;
  });
  client.addEventListener('entry', () => { $('text').disabled = $('send').disabled = false; }, { once: true });
  // Only a host or admin of this room may take a comment down (the entry's role).
  client.addEventListener('entry', (e) => { $('takedown').hidden = !['host', 'admin'].includes(e.detail.role); });
  client.addEventListener('takedown', (e) => {
    const { id, kind } = e.detail;
    if (kind === KIND_BARRAGE) stage.takeDown(id);
    else if (kind === KIND_GIFT) for (const li of gifts.el.querySelectorAll('.gift')) if (li.dataset.id === id) li.remove();
    else if (kind === KIND_SYSTEM && $('system').dataset.id === id) delete $('system').dataset.on;
    if (selected?.id === id) $('reportresult').textContent = 'taken down';
  });
  client.addEventListener('sent', (e) => {
    $('sendresult').textContent = e.detail.ok ? `sent “${e.detail.text}”` : `not sent: ${e.detail.error.code}`;
  });
  client.addEventListener('error', (e) => {
    stopped = true;
    $('status').textContent = `stopped: ${e.detail.error.message}`;
  });
  requestAnimationFrame(frame);
  setInterval(status, 500);
  await client.start();
}

$('sendform').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const input = $('text');
  try {
    const r = client.send(input.value);
    $('sendresult').textContent = r.deduped ? 'already sent within 10 s' : r.heldBack ? 'queued (one comment per 1.2 s)' : 'sending…';
    input.value = '';
  } catch (err) {
    $('sendresult').textContent = err.code === 'text_too_long' ? 'too long: at most 60 characters' : err.code === 'empty_text' ? 'nothing to send' : err.message;
  }
});

// ---------------------------------------------------------------- report and take down

$('comments').addEventListener('click', (ev) => {
  const el = ev.target.closest('.comment[data-on]');
  if (!el) return;
  selected = { id: el.dataset.id, kind: KIND_BARRAGE, text: el.textContent, el };
  $('reporttext').textContent = `“${selected.text}”`;
  $('reportresult').textContent = '';
  $('reportform').hidden = false;
});

$('reportform').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  if (!selected) return;
  const { id, kind } = selected, out = $('reportresult');
  try {
    if (ev.submitter?.id === 'takedown') {
      await client.takedown(id, kind, $('reason').value);
      out.textContent = 'taken down';
    } else {
      const r = await client.report(id, kind, $('reason').value);
      out.textContent = r.duplicate ? 'already reported' : 'reported, thank you';
    }
  } catch (err) {
    out.textContent = err.code === 'report_rate'
      ? `too many reports: try again in ${Math.ceil(err.retryAfterMs / 1000) || 'a few'} s`
      : `not done: ${err.code}`;
  }
});

$('reportclose').addEventListener('click', () => { $('reportform').hidden = true; selected = null; });

function status() {
  if (stopped) return;
  const s = client.stats();
  const r = s.render;
  const polls = s.firstPollHits + s.firstPollMisses;
  const hit = polls ? `${Math.round((100 * s.firstPollHits) / polls)}% (${s.firstPollHits}/${polls})` : '–';
  const lat = s.lastSegment ? `${s.lastSegment.latencyMs} ms` : '–';
  const now = Math.floor(performance.now() / 1000);
  const perSecond = now === rate.second ? rate.last : now === rate.second + 1 ? rate.n : 0;
  // The entry carries no online count yet: the message rate stands in for it.
  $('status').textContent = `latency ${lat} · segment ${s.segmentMs} ms · drops ${r.drops} ` +
    `(overflow ${r.droppedOverflow}, hidden ${r.droppedHidden}) · first-poll hits ${hit} · ` +
    `edge ${s.edgeState}${s.edgeCloseCode ? ` (last close ${s.edgeCloseCode})` : ''} · ` +
    `${perSecond} msg/s · online: n/a (not in the entry yet) · dup ${s.duplicates} · takedowns ${s.takedownsApplied}`;
}

window.danmakuDemo = {
  client, queue, room, user, gifts: gifts.shown,
  stats: () => ({ ...client?.stats(), onStage: stage.active.size, maxOnStage: stage.maxOnStage, newCount: queue.newCount, waiting: queue.length, removedFromStage: stage.removed }),
};

main().catch((err) => {
  $('status').textContent = `error: ${err.message}`;
  window.danmakuDemo.error = err.message;
});
