// The demo page of `danmaku dev` (served at the gslb's "/"): one viewer in
// ?room= (default "demo") as ?user= (default a random guest), with a dev
// ticket from /v1/dev/ticket (?role= asks for another role), or the ticket
// in the fragment (#ticket=…: never sent to a server, so never in a log).
// Click a comment to report it; a host or admin of the room may take it
// down. Under the barrage plays dev's live test stream (/hls/live.m3u8, with
// program date times) through the vendored hls.js, 3 s or 15 s behind live
// (?delay= picks the first), and the client shows each comment when this
// video reaches the moment its sender saw; replay seeks the video back and
// plays the recorded barrage at its playhead. Without the stream (404
// no_video) the stage is the plain one and the barrage runs by the wall
// clock. window.danmakuDemo exposes the client, the render queue, the video
// and the stage's counters for tests.
import * as danmaku from '../danmaku.js';
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

// ---------------------------------------------------------------- video

// hls.js keeps the video DELAYS behind the playlist's live edge
// (liveSyncDuration, changed with targetLatency and a seek), at normal speed
// (it never speeds up to catch up). A player that falls DRIFT_S further
// behind (stalls; a slow machine decoding below real time) is put back at
// its delay by hls.js (liveMaxLatencyDuration): a forward seek, which the
// SDK treats as one. Replay seeks REPLAY_BACK_S back into the hour the
// playlist keeps (internal/hlsdemo), lifts that bound and shows the native
// controls, so the viewer can seek both ways; the recorded barrage follows.
const DELAYS = [3, 15];
const DRIFT_S = 3;
const REPLAY_BACK_S = 60;
const video = { el: $('video'), hls: null, error: '', delay: DELAYS[0] };
let replay = null; // {r: DanmakuReplay, queue: RenderQueue} while replaying

// The program date time (unix ms) of the frame on screen: the playhead the
// client and the replay hold the barrage to; undefined before the first
// frame and without video (the SDK's wall-clock mode).
const playhead = () => video.hls?.playingDate?.getTime();

// Starts the video when the stream is there: true; false with video.error
// saying why not.
async function startVideo() {
  const r = await fetch('/hls/live.m3u8', { cache: 'no-store' });
  if (!r.ok) {
    const code = await r.json().then((b) => b?.error?.code, () => '');
    video.error = `no video (${code || `HTTP ${r.status}`})`;
    return false;
  }
  const { default: Hls } = await import('/sdk/vendor/hls.mjs');
  if (!Hls.isSupported()) {
    video.error = 'no video (this browser has no Media Source)';
    return false;
  }
  const asked = Number(params.get('delay'));
  video.delay = DELAYS.includes(asked) ? asked : DELAYS[0];
  $('delay').value = String(video.delay);
  const hls = new Hls({ liveSyncDuration: video.delay, liveMaxLatencyDuration: video.delay + DRIFT_S, maxLiveSyncPlaybackRate: 1, backBufferLength: 90 });
  video.hls = hls;
  hls.on(Hls.Events.ERROR, (_, d) => {
    if (!d.fatal) return; // hls.js retries those itself
    // The stream stopped (dev ended ffmpeg) or cannot be played: the
    // plain stage again, and the SDKs back to the wall clock.
    video.error = `video stopped (${d.details})`;
    video.hls = null;
    hls.destroy();
    video.el.hidden = true;
    $('novideo').hidden = false;
    $('videobar').hidden = true;
    if (replay) stopReplay();
  });
  hls.on(Hls.Events.MANIFEST_PARSED, () => {
    video.el.play().catch(() => { video.error = 'press play: the browser blocked autoplay'; video.el.controls = true; });
  });
  hls.loadSource('/hls/live.m3u8');
  hls.attachMedia(video.el);
  video.el.hidden = false;
  $('novideo').hidden = true;
  $('videobar').hidden = false;
  return true;
}

// A new delay behind live: hls.js's target, and a seek to it (a replay ends).
function setDelay(s) {
  if (!video.hls) return;
  if (replay) stopReplay();
  video.delay = s;
  video.hls.config.liveMaxLatencyDuration = s + DRIFT_S; // read at each playlist refresh
  video.hls.targetLatency = s;
  const p = video.hls.liveSyncPosition;
  if (p != null) video.el.currentTime = p;
}

// Replay: the video REPLAY_BACK_S back (at most to the playlist's start),
// and the recorded barrage at its playhead from a DanmakuReplay, into a
// render queue of its own. The live client goes on holding the live
// barrage to the same playhead; what it releases meanwhile is for moments
// the replay shows from the segments, and is dropped (nextMessage).
function startReplay() {
  const { el } = video;
  if (!video.hls || replay || !client?.entry) return;
  const from = el.seekable.length ? el.seekable.start(0) : 0;
  video.hls.config.liveMaxLatencyDuration = Infinity; // no pull back to live while replaying
  el.currentTime = Math.max(from, el.currentTime - REPLAY_BACK_S);
  el.controls = true;
  const q = new RenderQueue({ visible: VISIBLE, displayMs: DISPLAY_MS });
  watchVisibility(q);
  replay = { r: null, queue: q, error: '' };
  if (danmaku.DanmakuReplay) {
    const r = new danmaku.DanmakuReplay({ cdnURL: client.entry.cdn, room, segmentMs: client.stats().segmentMs, playhead });
    replay.r = r;
    r.addEventListener('message', (e) => q.push(e.detail));
    r.addEventListener('takedown', (e) => applyTakedown(e.detail));
    const mine = replay;
    r.start().catch((err) => { mine.error = err.message; });
  } else {
    replay.error = 'this SDK has no DanmakuReplay: the video alone';
  }
  stage.clear();
  $('replay').hidden = true;
  $('live').hidden = false;
  enableSend();
}

function stopReplay() {
  if (!replay) return;
  replay.r?.stop();
  replay = null;
  video.el.controls = false;
  stage.clear();
  queue.barrage.length = 0; // released for past moments while replaying
  $('replay').hidden = false;
  $('live').hidden = true;
  enableSend();
}

$('delay').addEventListener('change', (ev) => setDelay(Number(ev.target.value)));
$('replay').addEventListener('click', startReplay);
$('live').addEventListener('click', () => setDelay(video.delay));
$('sound').addEventListener('click', () => {
  video.el.muted = !video.el.muted;
  $('sound').textContent = video.el.muted ? '🔇 sound off' : '🔊 sound on';
});

// How far behind live the frame on screen is (on the server's clock).
function behindMs() {
  const p = playhead();
  return p > 0 ? (client?.entry ? client.serverNow() : Date.now()) - p : NaN;
}

// The next message for the stage: the live client's, or while replaying
// the replay's (the live client's gifts and announcements still show).
function nextMessage() {
  if (!replay) return queue.next();
  queue.barrage.length = 0;
  return queue.next() ?? replay.queue.next();
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
    const m = nextMessage();
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

let client = null, stopped = false, joined = false;
const rate = { second: 0, n: 0, last: 0 }; // messages delivered per second

async function devTicket() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get('ticket')) return fragment.get('ticket');
  const q = new URLSearchParams({ user, nick: user.slice(0, 6), ...(params.get('role') ? { role: params.get('role') } : {}) });
  const r = await fetch(`/v1/dev/ticket?${q}`);
  if (!r.ok) throw new Error(`dev ticket: HTTP ${r.status} (is this \`danmaku dev\`?)`);
  return (await r.json()).ticket;
}

// Sending is for live: a comment carries the sender's playhead, which a
// replay an hour back is not (the ingest takes 2 minutes behind at most).
function enableSend() { $('text').disabled = $('send').disabled = !joined || !!replay; }

// A takedown, from the live client or the replay: off the stage, out of the
// replay's queue (the client's own queue it cleans itself).
function applyTakedown({ id, kind }) {
  replay?.queue.remove(kind, id);
  if (kind === KIND_BARRAGE) stage.takeDown(id);
  else if (kind === KIND_GIFT) for (const li of gifts.el.querySelectorAll('.gift')) if (li.dataset.id === id) li.remove();
  else if (kind === KIND_SYSTEM && $('system').dataset.id === id) delete $('system').dataset.on;
  if (selected?.id === id) $('reportresult').textContent = 'taken down';
}

async function main() {
  const withVideo = await startVideo().catch((err) => { video.error = `no video (${err.message})`; return false; });
  client = new DanmakuClient({
    entryURL: location.origin, room, ticket: await devTicket(), render: queue,
    firstJoinJitterMs: Number(params.get('jitter') ?? 0), // one viewer opening a page: no need to wait
    ...(params.has('report') ? { reportIntervalMs: Number(params.get('report')) } : {}), // the browser test's: every second
    ...(withVideo ? { playhead } : {}), // without video: by the wall clock, as before
  });
  window.danmakuDemo.client = client;
  client.addEventListener('message', () => {
    const s = Math.floor(performance.now() / 1000);
    if (s !== rate.second) Object.assign(rate, { last: s === rate.second + 1 ? rate.n : 0, second: s, n: 0 });
    rate.n++;
  });
  client.addEventListener('entry', () => { joined = true; enableSend(); }, { once: true });
  // Only a host or admin of this room may take a comment down (the entry's role).
  client.addEventListener('entry', (e) => { $('takedown').hidden = !['host', 'admin'].includes(e.detail.role); });
  client.addEventListener('takedown', (e) => applyTakedown(e.detail));
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
    `${perSecond} msg/s · online: n/a (not in the entry yet) · dup ${s.duplicates} · takedowns ${s.takedownsApplied} · ` +
    syncStatus();
  $('videoinfo').textContent = videoStatus();
}

// The display skew (the frame on screen when a comment was shown minus the
// moment its sender saw), how many came after their moment, and the mode:
// the live client's, or the replay's while replaying.
function syncStatus() {
  const p = (replay?.r ?? client).stats().playhead;
  if (!p) return video.hls ? 'sync: n/a (this SDK has no playhead)' : `sync: wall clock, ${video.error}`;
  const skew = p.shown ? `skew p50 ${p.skewP50Ms} ms p99 ${p.skewP99Ms} ms` : 'skew –';
  return `${replay ? 'replay' : 'sync'} ${p.mode}: ${skew} · late ${p.late}`;
}

function videoStatus() {
  if (!video.hls) return video.error;
  const b = behindMs();
  const at = Number.isFinite(b) ? `${(b / 1000).toFixed(1)} s behind live` : 'starting…';
  if (replay) return `replay: ${at}${replay.error ? ` · ${replay.error}` : ''}`;
  return `video ${at} (target ${video.delay} s)${video.error ? ` · ${video.error}` : ''}`;
}

window.danmakuDemo = {
  client, queue, room, user, gifts: gifts.shown, setDelay, startReplay, stopReplay: () => setDelay(video.delay),
  // The video as a test sees it: null without one.
  video: () => video.hls && {
    currentTime: video.el.currentTime, paused: video.el.paused, playingDate: playhead() ?? null, behindMs: behindMs(),
    latency: video.hls.latency, targetLatency: video.hls.targetLatency, delay: video.delay, replaying: !!replay,
    width: video.el.videoWidth, height: video.el.videoHeight,
  },
  videoError: () => video.error,
  replayStats: () => replay?.r?.stats() ?? null,
  stats: () => ({ ...client?.stats(), onStage: stage.active.size, maxOnStage: stage.maxOnStage, newCount: queue.newCount, waiting: queue.length, removedFromStage: stage.removed }),
};

main().catch((err) => {
  $('status').textContent = `error: ${err.message}`;
  window.danmakuDemo.error = err.message;
});
