// danmaku browser SDK: the browser port of the Go SDK (package danmaku/sdk).
// One DanmakuClient per viewer per room: it joins through the entry endpoint,
// polls the room's segments from the CDN on the Go SDK's schedule, holds the
// edge WebSocket for gifts and system messages, merges both streams with the
// Go SDK's de-duplication rules, and throttles the viewer's own comments.
// RenderQueue decides what is on screen. README.md documents the API.
import { Decoder } from '@msgpack/msgpack';

export const KIND_BARRAGE = 1, KIND_GIFT = 2, KIND_SYSTEM = 3;
export const SEGMENT_DURATIONS = Object.freeze([1000, 500, 250]); // ms: the spans this SDK can name and schedule
export const MAX_VERSION = 2; // of segments, frames and manifests
export const PROTOCOL = 2; // the client protocol sent with the entry and the edge handshake (sdk/wire.Protocol): 2 adds the playhead time

// Edge close codes (contract: edge WebSocket).
export const CLOSE = Object.freeze({
  RESUME: 4001, RESUME_GAP: 4002, DRAINING: 4003, ROOM_ENDED: 4004, POLICY: 1008, TOO_BIG: 1009, TRY_LATER: 1013,
  BAD_HELLO: 4400, TOKEN_REJECTED: 4401, WRONG_NODE: 4403, HELLO_TIMEOUT: 4408,
  NO_SUCH_ROOM: 4404, ROOM_NOT_LIVE: 4409, BANNED: 4451,
});

export const DEFAULTS = Object.freeze({
  firstJoinJitterMs: 3000, // a room's viewers open the page together: spread the entry calls
  rejoinJitterMs: 3000, pollBackoffMaxMs: 5000, farBehindMs: 10000, seenIds: 100000, seenWindowMs: 120000,
  sendQueue: 5, sendIntervalMs: 1200, sendDedupMs: 10000, maxTextChars: 60, reportIntervalMs: 10000, httpTimeoutMs: 10000,
  takedownIds: 10000, // taken-down messages remembered (oldest forgotten first): a room's most (ingest.MaxTakedownsPerRoom)
});

// Why a viewer reports a comment (POST /v1/rooms/ROOM/reports).
export const REPORT_REASONS = Object.freeze(['spam', 'abuse', 'illegal', 'other']);

const MAX_SEGMENT_BYTES = 4 << 20, MAX_FRAME_BYTES = 1 << 20, MAX_MANIFEST_BYTES = 64 << 10;
const MAX_TAKEDOWN_LIST_BYTES = 2 << 20; // wire.MaxTakedownListBytes
const MAX_REASON_CHARS = 200; // a takedown's reason, normalised (the ingest's bound)
const MANIFEST_EVERY_MS = 1000; // a far-behind poller asks at most this often
const MISMATCH_RETRIES = 3;
const JOIN_BACKOFF = [500, 30000], EDGE_BACKOFF = [1000, 30000];
const MIN_TOKEN_REFRESH_MS = 5000;
// Clock refinement (sdk/clock.go): after a join whose round trip was long (a
// busy gslb at show start), a few samples of GET /v1/time, the tightest kept.
const CLOCK_GOOD_MS = 5, CLOCK_SAMPLES = 4, CLOCK_SAMPLE_GAP_MS = 2000, CLOCK_DRIFT = 20e-6;
const MAX_REPORT_DELTA = 1000; // drops and held each per report: the edge takes 200 of the two a second
// The report's service-level fields (sdk/wire/report.go): the edge
// refuses more segments, or more latencies in all, in one report.
const MAX_REPORT_SEGMENTS = 600, MAX_REPORT_LATENCIES = 10000;
const MAX_RECENT_TEXTS = 64;
// A fallback ingest answering 421 not_primary (the user's own node, the
// first address, is live): back to the first address after Retry-After
// (1 s when absent, 10 s at most), at most 3 times a post (sdk/send.go).
const NOT_PRIMARY_MAX = 3, NOT_PRIMARY_WAIT_MS = 1000, NOT_PRIMARY_MAX_WAIT_MS = 10000;
const ROOM_RE = /^[A-Za-z0-9_-]{1,64}$/;

/** An error with a stable code: the server's (bad_token, ...) or the SDK's. */
export class DanmakuError extends Error {
  constructor(code, message, { status = 0, retryAfterMs = 0, permanent = false } = {}) {
    super(message || code);
    Object.assign(this, { name: 'DanmakuError', code, status, retryAfterMs, permanent });
  }
  /** Whether the same request may succeed later (network, 5xx, 408, 429). */
  get temporary() { return this.status === 0 || this.status >= 500 || this.status === 408 || this.status === 429; }
}

// ---------------------------------------------------------------- ids, keys, time

/** Splits "<ms>-<seq>" into [ms, seq]; null when malformed. */
export function parseID(id) {
  const m = typeof id === 'string' && /^(\d{1,16})-(\d{1,20})$/.exec(id);
  return m ? [Number(m[1]), BigInt(m[2])] : null;
}

/**
 * Upper bounds (ms, inclusive) of the latency buckets of the report to the
 * edge, shared with the Go SDK and the edge (wire.LatencyBoundsMs; a Go test
 * holds this copy to it). "lat" has one count per bound and one above.
 */
export const LATENCY_BOUNDS_MS = Object.freeze([100, 250, 500, 750, 1000, 1250, 1500, 2000, 3000, 5000, 10000]);

/** The latency bucket of ms: the first whose bound is ≥ ms (negative: the first). */
export function latencyBucket(ms) {
  let i = 0;
  while (i < LATENCY_BOUNDS_MS.length && ms > LATENCY_BOUNDS_MS[i]) i++;
  return i;
}

/** Orders two ids like wire.CompareIDs; malformed ids sort first. */
export function compareIDs(a, b) {
  const pa = parseID(a), pb = parseID(b);
  if (!pa || !pb) return !pa && !pb ? (a < b ? -1 : a > b ? 1 : 0) : (!pa ? -1 : 1);
  if (pa[0] !== pb[0]) return pa[0] < pb[0] ? -1 : 1;
  return pa[1] === pb[1] ? 0 : (pa[1] < pb[1] ? -1 : 1);
}

// The key messages are de-duplicated by: ids are unique per lane only.
export const identityOf = (kind, id, site = false) => (site ? 's/' : kind === KIND_BARRAGE ? 'b/' : 'l/') + id;

// Object key of slot n of a room whose segments last segmentMs: unix seconds
// for 1 s rooms (as ever), the start in unix ms for shorter ones.
export const segmentKey = (room, slot, segmentMs) => segmentMs === 1000
  ? `rooms/${room}/s/${slot}.msgpack` : `rooms/${room}/ms/${slot * segmentMs}.msgpack`;
export const manifestKey = (room) => `rooms/${room}/live.json`;
// The room's takedown list (wire.TakedownListKey): every message taken down, oldest first.
export const takedownListKey = (room) => `rooms/${room}/takedowns.json`;

// Server time (ms) at which slot may be fetched, never earlier (a CDN may
// cache the 404): its end, the publish delay and the clock's margin.
export const dueMs = (slot, { segmentMs, publishDelayMs, marginMs }) => (slot + 1) * segmentMs + publishDelayMs + marginMs;
// The newest slot that is due at server time nowMs.
export const liveSlot = (nowMs, { segmentMs, publishDelayMs, marginMs }) =>
  Math.floor((nowMs - marginMs - publishDelayMs) / segmentMs) - 1;

// Clock offset (server minus local) and margin from an entry round trip sent
// at local t0, answered at t1 (sdk/entry.go): the offset is exact to within
// half the round trip, so due times are pushed back by more than that.
export function clockFromEntry(serverTimeMs, t0, t1) {
  const half = Math.max(t1 - t0, 0) / 2;
  return { offsetMs: serverTimeMs + half - t1, marginMs: Math.floor(half) + 1, atMs: t1 };
}

// The margin of clock estimate c at local time now, widened by drift.
const marginAt = (c, now) => c.marginMs + Math.max(now - c.atMs, 0) * CLOCK_DRIFT;

// How long to wait before asking again for a due slot that answered 404.
export const pollRetryMs = (segmentMs) => Math.min(200, segmentMs / 4);
// A back-off doubled within [lo, hi], and a wait between its half and it, so
// that clients that failed together retry apart.
export const nextBackoff = (prev, lo, hi) => Math.min(Math.max(2 * prev, lo), hi);
export const jittered = (b, rnd = Math.random) => b / 2 + rnd() * (b / 2);

// ---------------------------------------------------------------- decoding

const decoder = new Decoder({
  maxStrLength: 1 << 16, maxBinLength: 0, maxArrayLength: 1 << 17, maxMapLength: 64, maxExtLength: 0,
});

const isInt = (v) => Number.isSafeInteger(v);
const optStr = (v) => v === undefined || typeof v === 'string';
const optInt = (v) => v === undefined || isInt(v);

const bad = (what) => new DanmakuError('decode', `danmaku: undecodable ${what}`);

/** Converts one wire message map (docs/segment-format.md) to the SDK's form; throws if invalid. */
export function toMessage(w, via) {
  if (!w || typeof w !== 'object' || Array.isArray(w) || !parseID(w.id) || !isInt(w.k) ||
      w.k < KIND_BARRAGE || w.k > KIND_SYSTEM || !optInt(w.o) || (w.o ?? 0) < 0 || (w.o ?? 0) > 999 ||
      !optStr(w.u) || !optStr(w.n) || !optStr(w.a) || !optStr(w.x) || !optStr(w.g) || !optStr(w.r) ||
      !optInt(w.v) || !optInt(w.c) || (w.c ?? 0) < 0 || !optInt(w.p) || (w.p ?? 0) < 0 || !(w.st === undefined || typeof w.st === 'boolean') ||
      !(w.ids === undefined || (Array.isArray(w.ids) && w.ids.every((id) => typeof id === 'string')))) {
    throw bad('message');
  }
  return {
    id: w.id, kind: w.k, offset: w.o ?? 0, user: w.u ?? '', nick: w.n ?? '', avatar: w.a ?? '',
    text: w.x ?? '', gift: w.g ?? '', value: w.v ?? 0,
    count: w.c > 0 ? w.c : 1, // absent means one
    ids: w.ids ?? [], role: w.r ?? '', via,
    // A site-wide broadcast: its id is the site stream's, de-duplicated in
    // a lane of its own.
    site: w.st === true,
    // The sender's playhead (unix ms of the video frame it reacted to); 0
    // when it sent none: then placed at its id's millisecond (playheadOf).
    playheadMs: w.p ?? 0,
  };
}

function decodeMap(bytes, limit, what) {
  if (bytes.byteLength > limit) throw bad(what + ' (too large)');
  let o;
  try {
    o = decoder.decode(bytes);
  } catch {
    throw bad(what);
  }
  if (!o || typeof o !== 'object' || Array.isArray(o) || !isInt(o.v) || o.v < 1) throw bad(what);
  if (o.v > MAX_VERSION) throw new DanmakuError('version', `danmaku: ${what} v=${o.v} is newer than this SDK`);
  // m is never omitted, but a Go writer's empty list is nil: a frame that
  // carries only takedowns may have "m": null.
  if (o.m === null) o.m = [];
  if (typeof o.room !== 'string' || !ROOM_RE.test(o.room) || !Array.isArray(o.m)) throw bad(what);
  return o;
}

/**
 * Decodes a "td" list (segment, frame or takedowns.json; docs/segment-format.md):
 * [{id, kind}]. Absent or null is none; anything else malformed throws, like
 * a malformed message.
 */
export function toTakedowns(td, what = 'takedown') {
  if (td === undefined || td === null) return [];
  if (!Array.isArray(td)) throw bad(what);
  return td.map((t) => {
    if (!t || typeof t !== 'object' || Array.isArray(t) || !parseID(t.id) || !isInt(t.k) || t.k < KIND_BARRAGE || t.k > KIND_SYSTEM) {
      throw bad(what);
    }
    return { id: t.id, kind: t.k };
  });
}

/**
 * Checks a room's takedown list (rooms/ROOM/takedowns.json, wire.TakedownList):
 * {n, ids: [{id, kind}]}. Throws DanmakuError decode (or version).
 */
export function decodeTakedownList(o, room) {
  if (!o || typeof o !== 'object' || Array.isArray(o) || !isInt(o.v) || o.v < 1) throw bad('takedown list');
  if (o.v > 1) throw new DanmakuError('version', `danmaku: takedown list v=${o.v} is newer than this SDK`);
  const ids = toTakedowns(o.ids ?? [], 'takedown list');
  if (o.room !== room || !isInt(o.n) || o.n < ids.length) throw bad('takedown list');
  return { n: o.n, ids };
}

/** Decodes a segment: {v, room, t, seq, dur, ms?, messages, takedowns}. Throws DanmakuError. */
export function decodeSegment(bytes) {
  const o = decodeMap(bytes, MAX_SEGMENT_BYTES, 'segment');
  if (!isInt(o.t) || o.t < 0 || !isInt(o.seq) || !optInt(o.dur) || !optInt(o.ms)) throw bad('segment');
  return {
    v: o.v, room: o.room, t: o.t, seq: o.seq, dur: o.dur ?? 0, ms: o.ms,
    messages: o.m.map((w) => toMessage(w, 'segment')), takedowns: toTakedowns(o.td, 'segment'),
  };
}

/** Decodes an edge frame: {v, room, messages, takedowns}. Throws DanmakuError. */
export function decodeFrame(bytes) {
  const o = decodeMap(bytes, MAX_FRAME_BYTES, 'frame');
  return { v: o.v, room: o.room, messages: o.m.map((w) => toMessage(w, 'edge')), takedowns: toTakedowns(o.td, 'frame') };
}

/** How many takedowns a live manifest says the room's list holds ("td"; absent or unusable: 0). */
export const manifestTakedowns = (m) => (isInt(m?.td) && m.td > 0 ? m.td : 0);

// Where a segment or manifest starts, in unix ms: `ms` from version 2 on.
const startMs = (o) => (o.v >= 2 ? o.ms : o.t * 1000);

/** Whether segment seg is the one asked for: slot of a room with segmentMs. */
export function segmentMatches(seg, room, slot, segmentMs) {
  return seg.room === room && seg.dur === segmentMs && startMs(seg) === slot * segmentMs;
}

/** The slot (of segmentMs) a live manifest names as the newest written, or null when it is not usable. */
export function manifestSlot(m, room, segmentMs) {
  if (!m || !isInt(m.v) || m.v < 1 || m.v > MAX_VERSION || m.room !== room || !isInt(m.t) || !isInt(m.seq)) return null;
  return isInt(startMs(m)) ? Math.floor(startMs(m) / segmentMs) : null;
}

// ---------------------------------------------------------------- merge

/** Remembers delivered identities, bounded by count and by age (oldest forgotten first). */
export class SeenSet {
  constructor(max = DEFAULTS.seenIds, windowMs = DEFAULTS.seenWindowMs) {
    Object.assign(this, { max, windowMs, ids: new Map() }); // identity → server ms added; a Map iterates in insertion order
  }
  has(key) { return this.ids.has(key); }
  get size() { return this.ids.size; }
  add(key, now) {
    if (this.ids.has(key)) return;
    this.ids.set(key, now);
    for (const [k, at] of this.ids) {
      if (this.ids.size <= this.max && at >= now - this.windowMs) break;
      this.ids.delete(k);
    }
  }
}

/**
 * Remembers taken-down identities (identityOf), bounded by count: the
 * oldest is forgotten first (a Set iterates in insertion order).
 */
export class TakedownSet {
  constructor(max = DEFAULTS.takedownIds) { Object.assign(this, { max, ids: new Set() }); }
  has(key) { return this.ids.has(key); }
  get size() { return this.ids.size; }
  /** Adds key; false when it was already there. */
  add(key) {
    if (this.ids.has(key)) return false;
    this.ids.add(key);
    for (const k of this.ids) {
      if (this.ids.size <= this.max) break;
      this.ids.delete(k);
    }
    return true;
  }
}

/**
 * The form of msg to deliver, or null for a duplicate (sdk/merge.go admit). A
 * merged gift is decided by its whole ids list: delivered with only the ids
 * not yet shown, count cut to match, under the first of them if its own was.
 */
export function admit(seen, msg, now) {
  if (msg.ids.length === 0) {
    const key = identityOf(msg.kind, msg.id, msg.site);
    if (seen.has(key)) return null;
    seen.add(key, now);
    return msg;
  }
  const own = identityOf(msg.kind, msg.id);
  const idSeen = seen.has(own);
  const fresh = [];
  for (const id of msg.ids) {
    const key = identityOf(msg.kind, id);
    if (!seen.has(key)) {
      fresh.push(id);
      seen.add(key, now);
    }
  }
  seen.add(own, now);
  if (fresh.length === 0) return null;
  const out = { ...msg };
  if (fresh.length < msg.ids.length) {
    // Some were shown from the edge. Only one gift per id can be cut exactly;
    // otherwise showing the whole count again beats losing a gift.
    if (msg.count === msg.ids.length) out.count = fresh.length;
    out.ids = fresh;
  }
  if (idSeen) out.id = fresh[0];
  return out;
}

// ---------------------------------------------------------------- sending

// unicode.IsSpace, which Go's strings.Fields splits on (JS's \s differs: it
// has U+FEFF and lacks U+0085).
const SPACES = /[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/gu;
const LONE_SURROGATE = /[\ud800-\udfff]/gu; // with the u flag, only unpaired halves match

/** Collapses whitespace and trims, as the Go SDK does, so limits and de-duplication see what the ingest sees. */
export function normalizeText(s) {
  // Not trim(): it also strips U+FEFF, which Go keeps.
  return String(s).replace(LONE_SURROGATE, '').replace(SPACES, ' ').replace(/^ | $/g, '');
}

/** Normalises text and checks it for the ingest: throws DanmakuError empty_text / text_too_long. */
export function checkText(text, maxChars = DEFAULTS.maxTextChars) {
  const t = normalizeText(text);
  if (t === '') throw new DanmakuError('empty_text', 'danmaku: empty text');
  const n = [...t].length; // code points, like Go's runes
  if (n > maxChars) throw new DanmakuError('text_too_long', `danmaku: ${n} characters, at most ${maxChars}`);
  return t;
}

// The client-side layer of flow control (sdk/send.go): a queue of cap that
// drops its oldest entry, one post per intervalMs, the same text within
// dedupMs answered as success without being queued.
export class SendQueue {
  constructor(cap = DEFAULTS.sendQueue, intervalMs = DEFAULTS.sendIntervalMs, dedupMs = DEFAULTS.sendDedupMs) {
    Object.assign(this, { cap, intervalMs, dedupMs, q: [], recent: [], nextAt: -Infinity });
  }
  /** Queues text at local time now (with the sender's playhead, when known): {deduped, dropped, heldBack}. */
  push(text, now, playheadMs = undefined) {
    const r = { deduped: false, dropped: false, heldBack: false };
    if (this.dedupMs > 0) {
      this.recent = this.recent.filter((rt) => now - rt.at < this.dedupMs);
      if (this.recent.some((rt) => rt.text === text)) return { ...r, deduped: true };
      if (this.recent.length === MAX_RECENT_TEXTS) this.recent.shift();
      this.recent.push({ text, at: now });
    }
    r.heldBack = this.q.length > 0 || now < this.nextAt;
    if (this.q.length === this.cap) {
      // Never sent: forget it, so that typing it again is sent, not "deduplicated".
      const dropped = this.q.shift().text;
      r.dropped = true;
      const i = this.recent.findIndex((rt) => rt.text === dropped);
      if (i >= 0) this.recent.splice(i, 1);
    }
    this.q.push({ text, playheadMs });
    return r;
  }
  /** The text to post at local time now ({text[, playheadMs]}), the time to wait until ({until}), or null when empty. */
  next(now) {
    if (this.q.length === 0) return null;
    if (now < this.nextAt) return { until: this.nextAt };
    this.nextAt = now + this.intervalMs;
    const { text, playheadMs } = this.q.shift();
    return playheadMs === undefined ? { text } : { text, playheadMs };
  }
  get length() { return this.q.length; }
}

// ---------------------------------------------------------------- render queue

/**
 * Decides what is on screen, as sdk/render.go: `visible` slots held displayMs
 * each from next(), `buffer` waiting; a full buffer drops its oldest barrage,
 * gifts and system messages are never dropped and come first. Hidden and full
 * of gifts, a gift folds into a waiting one (see _collapse): counts are kept.
 */
export class RenderQueue {
  constructor({ visible = 32, buffer = 120, displayMs = 8000, now = () => performance.now() } = {}) {
    if (!(visible > 0 && buffer > 0 && displayMs > 0)) throw new DanmakuError('config', 'danmaku: render queue sizes must be positive');
    Object.assign(this, { visible, buffer, displayMs, now });
    // Plain arrays: shift() is O(n), but n is the buffer (120) or the slots (32).
    Object.assign(this, { barrage: [], priority: [], slots: [], _hidden: false, _newCount: 0 });
    this._stats = { pushed: 0, shown: 0, droppedOverflow: 0, droppedHidden: 0, beyondBuffer: 0, collapsedGifts: 0, takenDown: 0 };
  }

  push(m) {
    const keep = m.kind === KIND_GIFT || m.kind === KIND_SYSTEM, s = this._stats;
    s.pushed++;
    if (this._hidden) this._newCount++;
    if (this.length >= this.buffer) {
      if (this.barrage.length > 0) {
        this.barrage.shift();
        this._drop();
      } else if (!keep) {
        return this._drop();
      } else if (this._hidden && m.kind === KIND_GIFT && this._collapse(m)) {
        return void s.collapsedGifts++;
      } else {
        s.beyondBuffer++;
      }
    }
    if (!keep) return void this.barrage.push(m);
    this.priority.push(m.kind === KIND_GIFT ? { ...m } : m); // a gift's copy is ours to fold counts into
  }

  // Folds gift m into the oldest waiting gift of the same sender, gift and
  // value, else of the same gift and value (its sender then cleared: several
  // viewers), so a long absence holds at most one entry per gift of the
  // catalogue, and the sum of gift counts stays exact.
  _collapse(m) {
    const same = (w) => w.kind === KIND_GIFT && w.gift === m.gift && w.value === m.value;
    const w = this.priority.find((w) => same(w) && w.user === m.user) ?? this.priority.find(same);
    if (!w) return false;
    if (w.user !== m.user) Object.assign(w, { user: '', nick: '', avatar: '' });
    // The ids no longer say which gifts the entry stands for; its count does.
    Object.assign(w, { ids: [], count: w.count + m.count, collapsed: (w.collapsed || 1) + 1 });
    return true;
  }

  _drop() { this._stats[this._hidden ? 'droppedHidden' : 'droppedOverflow']++; }

  /**
   * Drops the waiting message a takedown names (kind and id; a merged gift
   * whose ids hold it, too): how many entries were removed (0 or 1,
   * counted as takenDown). One already shown is the stage's to remove (the
   * client's 'takedown' event).
   */
  remove(kind, id) {
    const key = identityOf(kind, id);
    const hit = (m) => !m.site && (identityOf(m.kind, m.id) === key || (m.kind !== KIND_BARRAGE && kind !== KIND_BARRAGE && m.ids.includes(id)));
    const list = kind === KIND_BARRAGE ? this.barrage : this.priority;
    let n = 0;
    for (let i = list.length - 1; i >= 0; i--) {
      if (hit(list[i])) {
        list.splice(i, 1);
        n++;
      }
    }
    this._stats.takenDown += n;
    return n;
  }

  _expire(now) { while (this.slots.length > 0 && now >= this.slots[0]) this.slots.shift(); }

  /** The next message to show (taking a slot for displayMs), or null: hidden, every slot taken, or nothing waits. */
  next() {
    const now = this.now();
    this._expire(now);
    if (this._hidden || this.slots.length >= this.visible) return null;
    let m;
    if (this.priority.length > 0) {
      m = this.priority.shift();
    } else if (this.barrage.length > 0) {
      m = this.barrage.shift();
    } else {
      return null;
    }
    this.slots.push(now + this.displayMs);
    this._stats.shown++;
    return m;
  }

  /** Hiding empties the screen (every slot freed) and restarts the "N new" count; showing resumes, oldest first. */
  setHidden(hidden) {
    hidden = !!hidden;
    if (hidden === this._hidden) return;
    this._hidden = hidden;
    this._newCount = 0;
    if (hidden) this.slots.length = 0;
  }

  get hidden() { return this._hidden; }
  /** Messages pushed since the queue was hidden (arrivals, so it may exceed what was kept); 0 while shown. */
  get newCount() { return this._newCount; }
  /** Messages waiting for a slot. */
  get length() { return this.barrage.length + this.priority.length; }
  /** Slots taken now. */
  onScreen() { this._expire(this.now()); return this.slots.length; }
  stats() { return { ...this._stats, drops: this.drops() }; }
  /** Every drop since creation (monotonic): what the counter report to the edge is the difference of. */
  drops() { return this._stats.droppedOverflow + this._stats.droppedHidden; }
}

/** Hides queue while the document is hidden (visibilitychange). Returns a function that stops watching. */
export function watchVisibility(queue, doc = globalThis.document) {
  const sync = () => queue.setHidden(doc.hidden);
  doc.addEventListener('visibilitychange', sync);
  sync();
  return () => doc.removeEventListener('visibilitychange', sync);
}

// ---------------------------------------------------------------- playhead

/**
 * Playhead synchronisation (docs/api.md "Playhead time"; the Go SDK's
 * sdk/playhead.go, whose rules and constants these are). With a `playhead`
 * clock and an entry that allows it (`sync`), a message is held until the
 * app's playhead reaches the sender's (playheadOf), in that order:
 *  - no playhead (the clock returns null, undefined, NaN, ≤ 0 or throws) or no
 *    sync in the entry: wall-clock mode, what is held is shown at once and
 *    new messages pass straight through; each switch counted as a fallback.
 *  - a jump: between two reads the playhead moved more than jumpMs more
 *    (seek forward, discontinuity) or less (seek back, stall) than the
 *    local clock. Forward: what is now due is shown, but barrage more than
 *    lateMs behind the new playhead is skipped (counted); gifts and system
 *    messages always shown. Back or stalled: what is held waits for the
 *    playhead to reach it again.
 *  - otherwise each message is shown when the playhead reaches its time, or
 *    at once when that has passed on arrival (late beyond lateAfterMs,
 *    counted with the largest lateness).
 * Held barrage is bounded (holdMaxBarrage: the earliest is shown early
 * beyond it, counted); gifts and system messages are never dropped.
 */
export const PLAYHEAD = Object.freeze({
  jumpMs: 2000, lateMs: 5000, holdMaxBarrage: 10000, tickMs: 20, lateAfterMs: 150,
  // The ingest takes a playhead at most 2 s ahead of its clock and 2 min
  // behind: a send keeps a margin inside both, else it goes without one.
  sendAheadMs: 1000, sendBehindMs: 110000, maxBehindMs: 120000,
  // DanmakuReplay: read-ahead past the 2 min a message may be stored after
  // its moment, and slots read per step.
  playerLeadMs: 5000, playerChunk: 32,
});
const SKEW_SAMPLES = 1024; // the display skews kept for the quantiles (the newest)

/** A message's moment: the sender's playhead, else its id's millisecond (wire.PlayheadOf). */
export const playheadOf = (m) => (m.playheadMs > 0 ? m.playheadMs : parseID(m.id)?.[0] ?? 0);

/** Reads an app's playhead clock: unix ms, or null when it does not know (or throws). A Date is taken too. */
export function readPlayhead(clock) {
  let v;
  try { v = clock(); } catch { return null; }
  if (v instanceof Date) v = v.getTime();
  return typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : null;
}

// The display-skew counters of a client or a replay: stats().playhead.
class SkewStats {
  constructor() {
    this.c = { received: 0, shown: 0, late: 0, lateMsMax: 0, skipped: 0, early: 0, fallbacks: 0, jumps: 0 };
    this.samples = []; // ring of the newest SKEW_SAMPLES
    this.at = 0;
    this.max = 0;
    // The skew again in the latency buckets shared with the edge (the client report's "skew").
    this.reported = new Array(LATENCY_BOUNDS_MS.length + 1).fill(0);
  }
  observe(skew) {
    if (skew > PLAYHEAD.lateAfterMs) {
      this.c.late++;
      this.c.lateMsMax = Math.max(this.c.lateMsMax, Math.round(skew));
    }
    this.max = Math.max(this.max, skew);
    this.reported[latencyBucket(skew)]++;
    if (this.samples.length < SKEW_SAMPLES) this.samples.push(skew);
    else this.samples[this.at] = skew;
    this.at = (this.at + 1) % SKEW_SAMPLES;
  }
  // held: waiting now; received: every message that went through the hold.
  summary(mode, held) {
    const s = [...this.samples].sort((a, b) => a - b);
    const q = (p) => (s.length ? Math.round(s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))]) : 0);
    return { mode, ...this.c, held, skewP50Ms: q(0.5), skewP99Ms: q(0.99), skewMaxMs: Math.round(this.max) };
  }
}

/** stats().playhead of a client without a playhead clock. */
export const PLAYHEAD_OFF = Object.freeze(new SkewStats().summary('off', 0));

/**
 * Holds messages until the playhead reaches their moment (the rules above).
 * The client owns one when it has a playhead clock; exported for tests.
 */
export class HoldQueue {
  constructor({ maxBarrage = PLAYHEAD.holdMaxBarrage } = {}) {
    Object.assign(this, { maxBarrage, items: [], seq: 0, barrage: 0, last: null, fallback: false, mode: 'wall' });
    this.skew = new SkewStats();
  }

  get length() { return this.items.length; }

  /** Holds m; returns what is to be shown now: the earliest held barrage beyond the bound (early rather than lost). */
  push(m) {
    const it = { at: playheadOf(m), seq: ++this.seq, m };
    // Sorted by (at, seq): a binary search for the first later item.
    let lo = 0, hi = this.items.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.items[mid].at <= it.at) lo = mid + 1; else hi = mid;
    }
    this.items.splice(lo, 0, it);
    this.skew.c.received++;
    if (m.kind === KIND_BARRAGE) this.barrage++;
    const early = [];
    while (this.barrage > this.maxBarrage) {
      const x = this.items.shift(); // gifts before the earliest barrage are shown with it
      if (x.m.kind === KIND_BARRAGE) {
        this.barrage--;
        this.skew.c.early++;
      }
      early.push(x.m);
    }
    this.skew.c.shown += early.length;
    return early;
  }

  /** Drops the held message a takedown names (a merged gift by any of its ids): how many (0 or 1). */
  remove(kind, id) {
    const key = identityOf(kind, id);
    const i = this.items.findIndex(({ m }) => !m.site && (identityOf(m.kind, m.id) === key ||
      (m.kind !== KIND_BARRAGE && kind !== KIND_BARRAGE && m.ids.includes(id))));
    if (i < 0) return 0;
    if (this.items[i].m.kind === KIND_BARRAGE) this.barrage--;
    this.items.splice(i, 1);
    return 1;
  }

  /** The moment of the earliest held message, or null. */
  next() { return this.items.length ? this.items[0].at : null; }

  /**
   * What is to be shown now, in playhead order: ph the playhead (null:
   * unknown), sync whether the entry allows it, local the local clock (ms).
   */
  release(ph, sync, local) {
    if (ph === null || !sync) {
      if (!this.fallback) {
        this.fallback = true;
        this.skew.c.fallbacks++;
      }
      this.mode = 'wall';
      this.last = null;
      return this._drain(() => true, null, false);
    }
    this.fallback = false;
    this.mode = 'playhead';
    let forward = false;
    if (this.last) {
      const drift = (ph - this.last.ph) - (local - this.last.local);
      if (Math.abs(drift) > PLAYHEAD.jumpMs) {
        this.skew.c.jumps++;
        forward = drift > 0;
      }
    }
    this.last = { ph, local };
    return this._drain((x) => x.at <= ph, ph, forward);
  }

  _drain(due, ph, forward) {
    const out = [];
    while (this.items.length > 0 && due(this.items[0])) {
      const x = this.items.shift();
      if (x.m.kind === KIND_BARRAGE) this.barrage--;
      if (ph !== null) {
        const skew = ph - x.at;
        if (forward && x.m.kind === KIND_BARRAGE && skew > PLAYHEAD.lateMs) {
          this.skew.c.skipped++;
          continue;
        }
        this.skew.observe(skew);
      }
      out.push(x.m);
    }
    this.skew.c.shown += out.length;
    return out;
  }

  stats() { return this.skew.summary(this.mode, this.items.length); }
}

// ---------------------------------------------------------------- client

// Resolves after ms, or at once when signal aborts.
function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => { clearTimeout(t); signal?.removeEventListener('abort', done); resolve(); };
    const t = setTimeout(done, Math.min(Math.max(ms, 0), 0x7fffffff));
    signal?.addEventListener('abort', done, { once: true });
  });
}

async function apiError(resp) {
  let code = `http_${resp.status}`, message = resp.statusText;
  try {
    const body = await resp.json();
    if (body?.error?.code) ({ code, message } = body.error);
  } catch { /* not JSON: keep the status */ }
  const ra = Number(resp.headers.get('Retry-After'));
  return new DanmakuError(code, message, { status: resp.status, retryAfterMs: ra > 0 ? ra * 1000 : 0 });
}

/** One viewer in one room; an EventTarget. README.md lists its options, events and stats. */
export class DanmakuClient extends EventTarget {
  constructor(cfg) {
    super();
    if (!cfg?.entryURL || !ROOM_RE.test(cfg.room ?? '') || !cfg.ticket) {
      throw new DanmakuError('config', 'danmaku: entryURL, a valid room and ticket are required');
    }
    this.cfg = { ...DEFAULTS, ...cfg };
    this.cfg.entryURL = this.cfg.entryURL.replace(/\/+$/, '');
    this._now = cfg.now ?? (() => performance.now());
    this._fetch = cfg.fetch ?? globalThis.fetch.bind(globalThis);
    this._WebSocket = cfg.WebSocket ?? globalThis.WebSocket;
    this._abort = new AbortController();
    this._seen = new SeenSet(this.cfg.seenIds, this.cfg.seenWindowMs);
    this._takedowns = new TakedownSet(this.cfg.takedownIds);
    // What the client holds of the room's takedown list: the n of the last
    // list fetched, at least; a manifest's td above it fetches the list.
    Object.assign(this, { _takedownN: 0, _listFetch: null });
    this._sendQ = new SendQueue(this.cfg.sendQueue, this.cfg.sendIntervalMs, this.cfg.sendDedupMs);
    // The app's video playhead (unix ms of the frame on screen; null when
    // unknown): messages are held until it reaches theirs (HoldQueue).
    if (cfg.playhead !== undefined && typeof cfg.playhead !== 'function') throw new DanmakuError('config', 'danmaku: playhead must be a function returning unix ms');
    this._playhead = cfg.playhead ?? null;
    this._hold = this._playhead ? new HoldQueue() : null;
    this._holdTimer = 0;
    Object.assign(this, { _session: null, _joining: null, _wakeSend: null, _everConnected: false });
    // What each report sent adds up to, and the delivered barrage by latency.
    const buckets = () => new Array(LATENCY_BOUNDS_MS.length + 1).fill(0);
    this._reported = { drops: 0, held: 0, segs: 0, hits: 0, lat: buckets(), skew: buckets(), at: -Infinity };
    this._latency = buckets();
    this._stats = {
      entryFetches: 0, segmentsFetched: 0, firstPollHits: 0, firstPollMisses: 0, notFoundRetries: 0,
      fetchErrors: 0, decodeErrors: 0, mismatchRetries: 0, mismatchSkipped: 0, seqGaps: 0,
      jumpsToLive: 0, skippedSlots: 0, edgeConnects: 0, edgeReconnects: 0, edgeDialErrors: 0,
      edgeFrames: 0, edgeDecodeErrors: 0, edgeTokenAsks: 0, reportsSent: 0, delivered: 0, duplicates: 0,
      sendsPosted: 0, sendsDeduped: 0, sendsDropped: 0, sendsHeldBack: 0, sendsFailed: 0,
      takedownsApplied: 0, takedownsDequeued: 0, takedownsSuppressed: 0, takedownListFetches: 0, takedownListErrors: 0,
      reportsFiled: 0, reportsDuplicate: 0, reportsFailed: 0,
      lastSegment: null, segmentMs: 0, edgeState: 'idle', edgeCloseCode: 0,
    };
  }

  get _stopped() { return this._abort.signal.aborted; }
  _emit(type, detail) { this.dispatchEvent(new CustomEvent(type, { detail })); }
  /** Server time in ms (local clock plus the offset of the last entry answer). */
  serverNow() { return this._now() + (this._session?.offsetMs ?? 0); }
  /** The current entry answer (null before the first join). */
  get entry() { return this._session?.entry ?? null; }

  /** Counters (a snapshot), plus the render queue's when cfg.render is set, and the playhead sync's. */
  stats() {
    return { ...this._stats, render: this.cfg.render?.stats(), playhead: this._hold ? this._hold.stats() : { ...PLAYHEAD_OFF } };
  }

  /** Joins and runs until stop(); rejects when the entry refuses the ticket or names an unknown segment_ms. */
  async start() {
    if (this._started) throw new DanmakuError('running', 'danmaku: start() already called');
    this._started = true;
    const failed = new Promise((_, reject) => { this._reject = reject; });
    failed.catch(() => {});
    try {
      await Promise.race([this._join(this.cfg.firstJoinJitterMs), failed]);
      if (this._stopped) return;
      if (this._hold) this._holdLoop();
      const loops = [this._pollLoop(), this._sendLoop(), this._refreshLoop(), this._refineLoop()];
      if (!this.cfg.noEdge) loops.push(this._edgeLoop());
      await Promise.race([Promise.all(loops), failed]);
    } catch (err) {
      this._fail(err);
      throw err;
    }
  }

  stop() { this._abort.abort(); this._wakeSend?.(); clearTimeout(this._holdTimer); }

  _fail(err) {
    if (this._failed) return;
    this._failed = true;
    this.stop();
    this._emit('error', { error: err });
    this._reject?.(err);
  }

  // ---- entry

  async _fetchEntry() {
    const url = `${this.cfg.entryURL}/v1/entry?room=${encodeURIComponent(this.cfg.room)}&proto=${PROTOCOL}`;
    this._stats.entryFetches++;
    const t0 = this._now();
    const resp = await this._fetch(url, {
      headers: { Authorization: `Bearer ${this.cfg.ticket}`, Accept: 'application/json' },
      signal: this._signal(),
    });
    if (!resp.ok) throw await apiError(resp);
    const e = await resp.json();
    const t1 = this._now();
    const segmentMs = e.segment_ms || 1000; // a gslb older than segment_ms means 1 s
    if (!SEGMENT_DURATIONS.includes(segmentMs)) {
      // An upgrade is needed; asking again will not help.
      throw new DanmakuError('bad_entry', `danmaku: segment_ms ${e.segment_ms} is not one of ${SEGMENT_DURATIONS}; this SDK cannot follow the room`, { permanent: true });
    }
    if (e.room !== this.cfg.room || !e.token || !e.cdn || !(e.server_time_ms > 0) || !(e.publish_delay_ms >= 0)) {
      throw new DanmakuError('bad_entry', 'danmaku: unusable entry answer');
    }
    if (!e.cdn.endsWith('/')) e.cdn += '/';
    return { entry: e, segmentMs, publishDelayMs: e.publish_delay_ms, ...clockFromEntry(e.server_time_ms, t0, t1) };
  }

  // An abort signal for one request: the client's stop, or the HTTP timeout.
  _signal() { return AbortSignal.any([this._abort.signal, AbortSignal.timeout(this.cfg.httpTimeoutMs)]); }

  async _join(jitterMs) {
    if (jitterMs > 0) await sleep(Math.random() * jitterMs, this._abort.signal);
    let backoff = JOIN_BACKOFF[0];
    while (!this._stopped) {
      try {
        const s = await this._fetchEntry();
        this._offerClock(s);
        this._session = s;
        this._useClock(s);
        this._emit('entry', s.entry);
        return;
      } catch (err) {
        if (this._stopped) return;
        if (err.permanent || (err instanceof DanmakuError && !err.temporary)) {
          throw new DanmakuError(err.code, `danmaku: join refused: ${err.message}`, { status: err.status, permanent: true });
        }
        const wait = Math.max(jittered(backoff), err.retryAfterMs || 0);
        backoff = Math.min(2 * backoff, JOIN_BACKOFF[1]);
        await sleep(wait, this._abort.signal);
      }
    }
  }

  /** Re-fetches the entry unless another task already replaced stale; a refusal stops the client. */
  async _rejoin(stale, jitterMs) {
    while (this._joining) await this._joining;
    if (this._session !== stale || this._stopped) return;
    this._joining = this._join(jitterMs).catch((err) => this._fail(err)).finally(() => { this._joining = null; });
    await this._joining;
  }

  // Keeps clock estimate c when it is tighter than the current one, as that
  // stands now; the session's offset and margin follow the best estimate.
  _offerClock(c) {
    const cur = this._clock;
    if (cur && marginAt(cur, c.atMs) <= c.marginMs) return;
    this._clock = { offsetMs: c.offsetMs, marginMs: c.marginMs, atMs: c.atMs };
    if (this._session) this._useClock(this._session);
  }

  _useClock(s) {
    s.offsetMs = this._clock.offsetMs;
    s.marginMs = Math.ceil(marginAt(this._clock, this._now()));
  }

  async _refineLoop() {
    let refined = null;
    while (!this._stopped) {
      const s = this._session;
      if (s === refined || marginAt(this._clock, this._now()) <= CLOCK_GOOD_MS) {
        await sleep(1000, this._abort.signal); // until the next join
        continue;
      }
      for (let i = 0; i < CLOCK_SAMPLES && !this._stopped; i++) {
        await sleep(CLOCK_SAMPLE_GAP_MS / 2 + Math.random() * CLOCK_SAMPLE_GAP_MS, this._abort.signal);
        try {
          const t0 = this._now();
          const resp = await this._fetch(`${this.cfg.entryURL}/v1/time`, { signal: this._signal() });
          if (resp.ok) {
            const body = await resp.json();
            if (body.server_time_ms > 0) this._offerClock(clockFromEntry(body.server_time_ms, t0, this._now()));
          }
        } catch { /* the next sample, or the next join */ }
        if (this._clock.marginMs <= CLOCK_GOOD_MS) break;
      }
      refined = s;
    }
  }

  async _refreshLoop() {
    while (!this._stopped) {
      const s = this._session, e = s.entry;
      const life = e.token_expires_ms - e.server_time_ms;
      const at = e.server_time_ms + Math.max(life * 0.8, MIN_TOKEN_REFRESH_MS);
      await this._waitServer(() => at);
      await this._rejoin(s, 0);
    }
  }

  // Waits until the server time reaches target(), re-read on every wake-up
  // (a re-join may move the offset, and timers may fire a little early).
  async _waitServer(target) {
    for (let left; !this._stopped && (left = target() - this.serverNow()) > 0;) {
      await sleep(left, this._abort.signal);
    }
  }

  async _get(url, limit) {
    const resp = await this._fetch(url, { signal: this._signal() });
    if (resp.status !== 200) {
      resp.body?.cancel().catch(() => {});
      return { status: resp.status };
    }
    const body = new Uint8Array(await resp.arrayBuffer());
    return { status: 200, body: body.byteLength > limit ? body.subarray(0, limit + 1) : body };
  }

  // ---- segments

  async _pollLoop() {
    const s = this._session;
    // D follows the room: from the entry, then from the manifest if the
    // room's segment duration changes.
    // The earliest time the join can have been at: serverNow is known only
    // within the clock margin (a start late by a few ms past a boundary
    // skipped messages sent after the join).
    const live = this.serverNow() - (s.marginMs ?? 0);
    const p = {
      D: s.segmentMs, slot: Math.floor(this._playheadStart(live) / s.segmentMs),
      seq: 0, haveSeq: false, backoff: 0, manifestAt: -Infinity, attempts: 0, mismatches: 0,
      catchUpMs: live, // a poller started behind on purpose walks up to here without jumping
    };
    this._stats.segmentMs = p.D;
    // A joiner learns from the manifest's td whether the room has taken
    // anything down (then fetches the list): a segment written before a
    // takedown may still be fetched, or an edge replay carry the message.
    // The due-time walk asks for the manifest again only when it has to.
    await this._manifest(p);
    p.manifestAt = -Infinity;
    while (!this._stopped) {
      try {
        await this._pollStep(p);
      } catch (err) {
        if (this._stopped) return;
        // Network errors (fetch's TypeError, timeouts) back off like a 5xx.
        await this._pollBackoff(p, 'fetchErrors');
      }
    }
  }

  _timing(p) { return { ...this._session, segmentMs: p.D }; }

  // Where the poller starts (sdk/playhead.go playheadStart): at live, or
  // for a viewer synchronised to a video behind live, at its playhead less
  // jumpMs — every message whose moment is still ahead of the video was
  // stored at or after it, and the CDN holds those segments already.
  // Bounded by the ingest's oldest playhead.
  _playheadStart(live) {
    const ph = this._playhead && this._session?.entry.sync === true ? readPlayhead(this._playhead) : null;
    return ph === null ? live : Math.min(live, Math.max(ph - PLAYHEAD.jumpMs, live - PLAYHEAD.maxBehindMs));
  }

  async _pollBackoff(p, counter) {
    this._stats[counter]++;
    p.backoff = nextBackoff(p.backoff, 2 * pollRetryMs(p.D), this.cfg.pollBackoffMaxMs);
    await sleep(jittered(p.backoff), this._abort.signal);
  }

  async _pollStep(p) {
    // Re-read the session on every wake-up: a re-join may move the offset.
    await this._waitServer(() => dueMs(p.slot, this._timing(p)));
    if (this._stopped || (await this._maybeJump(p))) return;
    const r = await this._get(this._session.entry.cdn + segmentKey(this.cfg.room, p.slot, p.D), MAX_SEGMENT_BYTES);
    const first = p.attempts++ === 0;
    if (r.status === 404) {
      // Due but not yet written: the slicer is a little late, or the room's
      // segment duration changed and this key never will be.
      if (first) this._stats.firstPollMisses++;
      this._stats.notFoundRetries++;
      p.backoff = 0;
      if (await this._followDuration(p)) return;
      return sleep(pollRetryMs(p.D), this._abort.signal);
    }
    if (r.status !== 200) return this._pollBackoff(p, 'fetchErrors');
    this._stats.segmentsFetched++;
    p.backoff = 0;
    let seg = null;
    try {
      seg = decodeSegment(r.body);
    } catch {
      this._stats.decodeErrors++;
    }
    if (seg && !segmentMatches(seg, this.cfg.room, p.slot, p.D)) {
      // A CDN served another object: ask again, a few times, then skip.
      if (p.mismatches++ < MISMATCH_RETRIES) return this._pollBackoff(p, 'mismatchRetries');
      this._stats.mismatchSkipped++;
      seg = null;
    }
    if (first) this._stats.firstPollHits++;
    if (seg && p.haveSeq && seg.seq !== p.seq) this._stats.seqGaps++;
    if (seg) Object.assign(p, { seq: seg.seq, haveSeq: true });
    this._advance(p, seg);
  }

  // Moves past p.slot, delivering seg (null: skipped, which used up one seq).
  _advance(p, seg) {
    const slot = p.slot;
    Object.assign(p, { slot: slot + 1, seq: p.seq + 1, attempts: 0, mismatches: 0 });
    if (!seg) return;
    const latencyMs = Math.round(this.serverNow() - (slot + 1) * p.D);
    this._stats.lastSegment = { slot, seq: seg.seq, latencyMs, count: seg.messages.length };
    this._applyTakedowns(seg.takedowns, 'segment');
    this._deliver(seg.messages);
    this._emit('segment', this._stats.lastSegment);
  }

  // The live manifest, at most once per MANIFEST_EVERY_MS; null when
  // unavailable, unusable or asked for too recently.
  async _manifest(p) {
    const now = this.serverNow();
    if (now - p.manifestAt < MANIFEST_EVERY_MS) return null;
    p.manifestAt = now;
    try {
      const r = await this._get(this._session.entry.cdn + manifestKey(this.cfg.room), MAX_MANIFEST_BYTES);
      const m = r.status === 200 ? JSON.parse(new TextDecoder().decode(r.body)) : null;
      if (manifestSlot(m, this.cfg.room, p.D) === null || !SEGMENT_DURATIONS.includes(m.dur)) return null;
      this._noteTakedownCount(manifestTakedowns(m));
      return m;
    } catch {
      return null;
    }
  }

  // Moves p to the grid of duration D at the same time: durations change at
  // whole seconds, where both grids meet.
  _regrid(p, D) {
    Object.assign(p, { slot: Math.ceil((p.slot * p.D) / D), D, attempts: 0, mismatches: 0 });
    this._stats.segmentMs = D;
  }

  // A due slot still missing long after its due time: if the manifest says
  // the room has ended and this slot is past its last segment, the client is
  // done ('ended' event, start() resolves); if it names another segment
  // duration, the room changed it; follow.
  async _followDuration(p) {
    if (this.serverNow() - dueMs(p.slot, this._timing(p)) < Math.max(1000, 4 * p.D)) return false;
    const m = await this._manifest(p);
    if (m && m.ended && p.slot * p.D > startMs(m)) {
      this._emit('ended', { room: this.cfg.room });
      this.stop();
      return true;
    }
    if (!m || m.dur === p.D) return false;
    this._regrid(p, m.dur);
    return true;
  }

  // Jumps to live when more than farBehindMs behind, but only to a slot a
  // manifest names as written and itself that far ahead: a slicer catching
  // up is walked through, and without a manifest nothing is skipped.
  async _maybeJump(p) {
    const far = this.cfg.farBehindMs;
    if (!(far > 0) || p.slot * p.D < p.catchUpMs) return false;
    const live = liveSlot(this.serverNow(), this._timing(p));
    if ((live - p.slot) * p.D <= far) return false;
    // A viewer synchronised to a video behind live still needs every
    // segment from its playhead less jumpMs on (what was stored there is
    // due ahead of its video): it jumps no further than that.
    const need = Math.floor(this._playheadStart(live * p.D + p.D) / p.D);
    if (need <= p.slot) return false;
    const m = await this._manifest(p);
    if (!m) return false;
    if (m.dur !== p.D) {
      // The room changed its segment duration: the new grid, then judge again.
      this._regrid(p, m.dur);
      Object.assign(p, { haveSeq: false, manifestAt: -Infinity });
      return true;
    }
    const mSlot = manifestSlot(m, this.cfg.room, p.D);
    if ((mSlot - p.slot) * p.D <= far) return false;
    let [target, seq, haveSeq] = mSlot <= live ? [mSlot, m.seq, true] : [live, 0, false];
    if (need < target) [target, seq, haveSeq] = [need, 0, false];
    this._stats.jumpsToLive++;
    this._stats.skippedSlots += target - p.slot;
    Object.assign(p, { slot: target, seq, haveSeq, attempts: 0, mismatches: 0 });
    return true;
  }

  // ---- takedowns

  /** Whether the message kind/id was taken down (as far as this client remembers: cfg.takedownIds). */
  takenDown(id, kind = KIND_BARRAGE) { return this._takedowns.has(identityOf(kind, id)); }

  // Applies takedowns from any source (edge, segment, list, local): each new
  // one is remembered, dropped from the render queue if waiting, and
  // announced with a 'takedown' event, on which the app removes it from the
  // stage if shown.
  _applyTakedowns(list, via) {
    for (const t of list) {
      if (!this._takedowns.add(identityOf(t.kind, t.id))) continue;
      this._stats.takedownsApplied++;
      // Held for the playhead or waiting for a slot: never shown.
      const dequeued = (this._hold?.remove(t.kind, t.id) ?? 0) + (this.cfg.render?.remove(t.kind, t.id) ?? 0);
      this._stats.takedownsDequeued += dequeued;
      this._emit('takedown', { id: t.id, kind: t.kind, via, dequeued: dequeued > 0 });
    }
  }

  // A manifest says the room's list holds n takedowns: fetch the list when
  // that is more than this client holds (one fetch at a time).
  _noteTakedownCount(n) {
    if (n <= this._takedownN || this._listFetch) return;
    this._listFetch = this._fetchTakedownList().finally(() => { this._listFetch = null; });
  }

  async _fetchTakedownList() {
    this._stats.takedownListFetches++;
    try {
      const r = await this._get(this._session.entry.cdn + takedownListKey(this.cfg.room), MAX_TAKEDOWN_LIST_BYTES);
      if (r.status !== 200) throw new DanmakuError(`http_${r.status}`, 'danmaku: takedown list unavailable');
      if (r.body.byteLength > MAX_TAKEDOWN_LIST_BYTES) throw bad('takedown list (too large)');
      let o;
      try { o = JSON.parse(new TextDecoder().decode(r.body)); } catch { throw bad('takedown list'); }
      const list = decodeTakedownList(o, this.cfg.room);
      this._applyTakedowns(list.ids, 'list');
      this._takedownN = Math.max(this._takedownN, list.n);
    } catch {
      // The next manifest that names more asks again.
      if (!this._stopped) this._stats.takedownListErrors++;
    }
  }

  // m less what was taken down: null when it was, and a merged gift without
  // the ids that were (its count cut to match when it is one gift per id,
  // as admit does).
  _withoutTakenDown(m) {
    if (m.site) return m;
    const down = (id) => this._takedowns.has(identityOf(m.kind, id));
    if (m.ids.length === 0) return down(m.id) ? null : m;
    const keep = m.ids.filter((id) => !down(id));
    if (keep.length === 0) return null;
    if (keep.length === m.ids.length && !down(m.id)) return m;
    return { ...m, ids: keep, count: m.count === m.ids.length ? keep.length : m.count, id: down(m.id) ? keep[0] : m.id };
  }

  _deliver(messages) {
    const now = this.serverNow();
    for (const w of messages) {
      const m = this._withoutTakenDown(w);
      if (!m) {
        // A later copy (a segment after the edge, a carried gift) of a
        // message taken down: never shown.
        this._stats.takedownsSuppressed++;
        continue;
      }
      const out = admit(this._seen, m, now);
      if (!out) {
        this._stats.duplicates++;
        continue;
      }
      this._stats.delivered++;
      // Barrage latency: from its id's millisecond (the ingest's append, on
      // the clock serverNow estimates) to its delivery here. With a
      // playhead, the hold's own delay is the display skew, counted apart.
      if (out.kind === KIND_BARRAGE) this._latency[latencyBucket(now - parseID(out.id)[0])]++;
      if (this._hold) this._hold.push(out).forEach((m) => this._show(m));
      else this._show(out);
    }
    // What arrived after its moment is shown now, not at the next tick.
    if (this._hold && this._started && !this._stopped) this._holdRelease();
  }

  // Hands m to the render queue and the app.
  _show(m) {
    this.cfg.render?.push(m);
    this._emit('message', m);
  }

  // ---- playhead

  // Reads the playhead once and shows what is due; the wait until the next
  // read (at most PLAYHEAD.tickMs: the display skew's floor).
  _holdRelease() {
    const ph = readPlayhead(this._playhead);
    const out = this._hold.release(ph, this._session?.entry.sync === true, this._now());
    for (const m of out) this._show(m);
    const at = this._hold.next();
    return at !== null && ph !== null && at > ph ? Math.min(PLAYHEAD.tickMs, at - ph) : PLAYHEAD.tickMs;
  }

  _holdLoop() {
    if (this._stopped) return;
    let wait = PLAYHEAD.tickMs;
    try {
      wait = this._holdRelease();
    } finally {
      // An app's handler that throws does not stop the hold.
      this._holdTimer = setTimeout(() => this._holdLoop(), wait);
    }
  }

  // The playhead a comment is sent with: the app's, when the ingest will
  // take it (at most 2 s ahead of its clock, 2 min behind; PLAYHEAD keeps
  // a margin), else none.
  _sendPlayhead(ph) {
    if (!(ph > 0)) return undefined;
    const now = this.serverNow();
    return ph > now + PLAYHEAD.sendAheadMs || ph < now - PLAYHEAD.sendBehindMs ? undefined : Math.floor(ph);
  }

  // ---- edge

  _edgeState(state, code = 0) {
    this._stats.edgeState = state;
    if (code) this._stats.edgeCloseCode = code;
    this._emit('edge', { state, code });
  }

  async _edgeLoop() {
    const cfg = this.cfg;
    let idx = 0, backoff = 0, stuck = 0, policy = 0, last = '', lastAt = 0;
    const pause = (ms) => sleep(ms, this._abort.signal);
    while (!this._stopped) {
      const s = this._session;
      const addrs = s.entry.edge ?? [];
      if (addrs.length === 0) {
        // Poll-only until an entry names an edge.
        this._edgeState('none');
        await pause(1000);
        continue;
      }
      if (idx >= addrs.length) idx = 0;
      // Resume only while what the edge would replay is still in the
      // seen-set; segments carry every gift, so starting fresh loses nothing.
      if (last && this.serverNow() - lastAt > cfg.seenWindowMs / 2) last = '';
      const r = await this._edgeConnect(addrs[idx], s.entry.token, last);
      last = r.last;
      lastAt = this.serverNow();
      if (this._stopped) return;
      if (!r.opened) {
        this._stats.edgeDialErrors++;
        if (++idx < addrs.length) continue;
        // Every address failed: back off, then ask the gslb for fresh ones.
        idx = 0;
        backoff = nextBackoff(backoff, ...EDGE_BACKOFF);
        await pause(jittered(backoff));
        await this._rejoin(s, cfg.rejoinJitterMs);
        continue;
      }
      backoff = 0;
      if (r.frames > 0) policy = 0;
      switch (r.code) {
        case CLOSE.ROOM_ENDED:
        case CLOSE.NO_SUCH_ROOM:
        case CLOSE.ROOM_NOT_LIVE:
          // The room's event is over (or not on): the segments carry the
          // rest, and the poller ends the client after the last one.
          this._stats.edgeState = 'ended';
          return;
        case CLOSE.BANNED:
          // An operator banned this user: the edge and the entry refuse it
          // until the ban ends, so do not reconnect. The segments still
          // show the room.
          this._stats.edgeState = 'banned';
          return;
        case CLOSE.RESUME:
          // At once, with last. A resume before any frame means the edge
          // cannot catch this client up: back off instead of looping.
          if (r.frames > 0) { stuck = 0; break; }
          stuck = nextBackoff(stuck, ...EDGE_BACKOFF);
          await pause(jittered(stuck));
          break;
        case CLOSE.RESUME_GAP:
          // The edge no longer holds the resume point: start fresh; the
          // poller's walk through the segments delivers the gap.
          last = '';
          if (cfg.rejoinJitterMs > 0) await pause(Math.random() * cfg.rejoinJitterMs);
          break;
        case CLOSE.DRAINING:
        case CLOSE.TOKEN_REJECTED:
          // The session at close time: a refresh since the dial must not turn
          // a drain into an immediate reconnect to the old address list.
          await this._rejoin(this._session, cfg.rejoinJitterMs);
          idx = 0;
          break;
        case CLOSE.WRONG_NODE:
          if (++idx < addrs.length) break;
          idx = 0;
          await this._rejoin(this._session, cfg.rejoinJitterMs);
          break;
        case CLOSE.POLICY:
        case CLOSE.TOO_BIG:
        case CLOSE.BAD_HELLO:
        case CLOSE.TRY_LATER:
          policy = nextBackoff(policy, ...EDGE_BACKOFF);
          await pause(jittered(policy));
          break;
        default:
          // A dropped connection: every client of that edge reconnects now,
          // so spread them out. last resumes the stream.
          if (cfg.rejoinJitterMs > 0) await pause(Math.random() * cfg.rejoinJitterMs);
      }
    }
  }

  // One connection: resolves when it ends with {opened, code, frames, last}.
  _edgeConnect(addr, token, last) {
    return new Promise((resolve) => {
      let ws, opened = false, frames = 0, timer = 0;
      this._edgeState('connecting');
      const onAbort = () => ws.close(1000);
      try {
        // The protocol in the URL (it is no secret); never a token: it leaks into logs.
        ws = new this._WebSocket(addr + (addr.includes('?') ? '&' : '?') + `proto=${PROTOCOL}`);
      } catch {
        resolve({ opened, code: 0, frames, last });
        return;
      }
      ws.binaryType = 'arraybuffer';
      this._abort.signal.addEventListener('abort', onAbort, { once: true });
      // The token the edge holds for this connection: a refreshed entry's
      // goes out in-band, so the connection outlives the token it opened
      // with (the edge closes one whose token expired, 4401).
      let edgeTok = token;
      const sendToken = () => {
        const t = this._session?.entry.token;
        if (ws.readyState !== 1 || !t || t === edgeTok) return;
        ws.send(JSON.stringify({ token: t }));
        edgeTok = t;
      };
      this.addEventListener('entry', sendToken);
      ws.onopen = () => {
        opened = true;
        this._stats.edgeConnects++;
        if (this._everConnected) this._stats.edgeReconnects++;
        this._everConnected = true;
        ws.send(JSON.stringify(last ? { token, last } : { token }));
        sendToken(); // an entry refreshed while dialling
        this._edgeState('open');
        if (this.cfg.reportIntervalMs > 0) timer = setInterval(() => this._report(ws), this.cfg.reportIntervalMs);
      };
      ws.onmessage = (ev) => {
        if (typeof ev.data === 'string') {
          // {"refresh":"token","exp_ms":N}: the edge asks for a fresh
          // token. Send the session's when it is newer, else refresh the
          // entry now (its token then goes out through sendToken).
          let ask;
          try { ask = JSON.parse(ev.data); } catch { return; }
          if (ask?.refresh !== 'token') return;
          this._stats.edgeTokenAsks++;
          if (this._session?.entry.token !== edgeTok) sendToken();
          else this._rejoin(this._session, 0);
          return;
        }
        frames++;
        this._stats.edgeFrames++;
        let f;
        try {
          f = decodeFrame(new Uint8Array(ev.data));
          if (f.room !== this.cfg.room) throw bad('frame (room)');
        } catch {
          this._stats.edgeDecodeErrors++;
          return;
        }
        // A site-wide broadcast's id is the site stream's: it must not move
        // the room's resume point.
        for (const m of f.messages) if (!m.site && compareIDs(m.id, last) > 0) last = m.id;
        this._applyTakedowns(f.takedowns, 'edge');
        this._deliver(f.messages);
      };
      ws.onclose = (ev) => {
        clearInterval(timer);
        this.removeEventListener('entry', sendToken);
        this._abort.signal.removeEventListener('abort', onAbort);
        this._edgeState('closed', ev.code);
        resolve({ opened, code: ev.code, frames, last });
      };
    });
  }

  // Reports render drops, held-back sends, segments fetched, first-poll
  // hits, the delivered barrage by latency and the display skew since the previous report that
  // went out, at most once per reportIntervalMs across reconnects (the
  // frame of sdk/report.go). What is above the edge's bounds goes out later.
  _report(ws) {
    const r = this._reported, now = this._now(), st = this._stats;
    if (ws.readyState !== 1 || now - r.at < this.cfg.reportIntervalMs) return;
    const drops = this.cfg.render?.drops() ?? 0, held = st.sendsHeldBack;
    const rep = { drops: Math.min(drops - r.drops, MAX_REPORT_DELTA), held: Math.min(held - r.held, MAX_REPORT_DELTA) };
    const segs = Math.min(st.segmentsFetched - r.segs, MAX_REPORT_SEGMENTS);
    // The edge refuses hits > segs: hits beyond this report's segments wait.
    const hits = Math.min(st.firstPollHits - r.hits, segs);
    if (segs > 0) Object.assign(rep, { segs, hits });
    let budget = MAX_REPORT_LATENCIES;
    const lat = this._latency.map((n, i) => {
      const d = Math.min(n - r.lat[i], budget);
      budget -= d;
      return d;
    });
    if (budget < MAX_REPORT_LATENCIES) rep.lat = lat;
    // The display skew (playhead sync), in the same buckets, within its own bound.
    let skewBudget = MAX_REPORT_LATENCIES;
    const skew = (this._hold?.skew.reported ?? r.skew).map((n, i) => {
      const d = Math.min(n - r.skew[i], skewBudget);
      skewBudget -= d;
      return d;
    });
    if (skewBudget < MAX_REPORT_LATENCIES) rep.skew = skew;
    if (rep.drops === 0 && rep.held === 0 && !rep.segs && !rep.lat && !rep.skew) return;
    ws.send(JSON.stringify(rep));
    Object.assign(r, { drops: r.drops + rep.drops, held: r.held + rep.held, segs: r.segs + segs, hits: r.hits + hits, at: now });
    lat.forEach((d, i) => { r.lat[i] += d; });
    skew.forEach((d, i) => { r.skew[i] += d; });
    this._stats.reportsSent++;
  }

  // ---- sending

  /**
   * Queues a comment: {deduped, dropped, heldBack}; throws DanmakuError
   * empty_text, text_too_long or closed. With a playhead clock it carries
   * the playhead of now, the moment the viewer reacted to (playhead_ms).
   */
  send(text) {
    if (this._stopped) throw new DanmakuError('closed', 'danmaku: client stopped');
    const t = checkText(text, this.cfg.maxTextChars);
    const ph = this._playhead ? readPlayhead(this._playhead) ?? undefined : undefined;
    const r = this._sendQ.push(t, this._now(), ph);
    if (r.deduped) this._stats.sendsDeduped++;
    if (r.dropped) this._stats.sendsDropped++;
    if (r.heldBack) this._stats.sendsHeldBack++;
    this._wakeSend?.();
    return r;
  }

  async _sendLoop() {
    while (!this._stopped) {
      const n = this._sendQ.next(this._now());
      if (!n) {
        await new Promise((resolve) => { this._wakeSend = resolve; });
        this._wakeSend = null;
      } else if (n.until !== undefined) {
        await sleep(n.until - this._now(), this._abort.signal);
      } else {
        try {
          // Checked against the ingest's bounds when posted: a comment held
          // back for long goes without a playhead rather than refused.
          const playheadMs = this._sendPlayhead(n.playheadMs);
          await this._post(`/v1/rooms/${this.cfg.room}/barrage`, playheadMs ? { text: n.text, playhead_ms: playheadMs } : { text: n.text });
          this._stats.sendsPosted++;
          this._emit('sent', { text: n.text, ok: true });
        } catch (error) {
          if (this._stopped) return;
          this._stats.sendsFailed++;
          this._emit('sent', { text: n.text, ok: false, error });
        }
      }
    }
  }

  /**
   * Reports message kind/id of this room to its moderators (POST
   * /v1/rooms/ROOM/reports with the viewer's token). Resolves
   * {ok, duplicate} (duplicate: this user reported it before); rejects with
   * a DanmakuError: bad_report (checked here first), report_rate (429,
   * retryAfterMs), closed, or the server's code. Emits 'reported'.
   */
  async report(id, kind = KIND_BARRAGE, reason = 'other') {
    if (this._stopped) throw new DanmakuError('closed', 'danmaku: client stopped');
    if (!parseID(id) || !isInt(kind) || kind < KIND_BARRAGE || kind > KIND_SYSTEM || !REPORT_REASONS.includes(reason)) {
      throw new DanmakuError('bad_report', `danmaku: a report names a message id, its kind (1-3) and a reason (${REPORT_REASONS.join('|')})`);
    }
    if (!this._session) throw new DanmakuError('not_joined', 'danmaku: not joined yet');
    try {
      const r = await this._post(`/v1/rooms/${this.cfg.room}/reports`, { id, k: kind, reason }, { rateFinal: true });
      const duplicate = r?.duplicate === true;
      this._stats[duplicate ? 'reportsDuplicate' : 'reportsFiled']++;
      this._emit('reported', { id, kind, reason, ok: true, duplicate });
      return { ok: true, duplicate };
    } catch (error) {
      this._stats.reportsFailed++;
      this._emit('reported', { id, kind, reason, ok: false, error });
      throw error;
    }
  }

  /**
   * Takes message kind/id down (POST /v1/admin/rooms/ROOM/takedowns with
   * this client's token: a host or admin ticket scoped to the room). Applied
   * here at once; every viewer gets it from the edge or the next segment.
   * Resolves the server's {takedown}; rejects with a DanmakuError
   * (bad_takedown checked here, else the server's code: forbidden, ...).
   */
  async takedown(id, kind = KIND_BARRAGE, reason = '') {
    if (this._stopped) throw new DanmakuError('closed', 'danmaku: client stopped');
    // The ingest normalises the reason as it does a comment, then counts it.
    if (!parseID(id) || !isInt(kind) || kind < KIND_BARRAGE || kind > KIND_SYSTEM || typeof reason !== 'string' || [...normalizeText(reason)].length > MAX_REASON_CHARS) {
      throw new DanmakuError('bad_takedown', `danmaku: a takedown names a message id, its kind (1-3) and a reason of at most ${MAX_REASON_CHARS} characters`);
    }
    if (!this._session) throw new DanmakuError('not_joined', 'danmaku: not joined yet');
    const r = await this._post(`/v1/admin/rooms/${this.cfg.room}/takedowns`, { id, k: kind, reason }, { rateFinal: true });
    this._applyTakedowns([{ id, kind }], 'local');
    return r;
  }

  // Posts payload (JSON) to path of the room's ingest: the next address on
  // network and server errors and on wrong_node (and on 429, unless
  // rateFinal: a per-user rate is the same on every node); back to the first
  // address (the user's own node) after Retry-After when a fallback answers
  // 421 not_primary, at most NOT_PRIMARY_MAX times a post; one re-join when
  // the token is refused.
  async _post(path, payload, { rateFinal = false } = {}) {
    const body = JSON.stringify(payload);
    let s = this._session, rejoined = false, notPrimary = 0;
    for (;;) {
      const ingest = s.entry.ingest ?? [];
      if (ingest.length === 0) throw new DanmakuError('no_ingest', 'danmaku: the entry named no ingest address');
      let lastErr;
      for (let i = 0; i < ingest.length; i++) {
        const url = ingest[i].replace(/\/+$/, '') + path;
        try {
          const resp = await this._fetch(url, {
            method: 'POST', body, signal: this._signal(),
            headers: { Authorization: `Bearer ${s.entry.token}`, 'Content-Type': 'application/json' },
          });
          if (!resp.ok) throw await apiError(resp);
          return await resp.json();
        } catch (err) {
          if (this._stopped) throw err;
          lastErr = err instanceof DanmakuError ? err : new DanmakuError('network', String(err?.message ?? err));
          if (lastErr.temporary && !(rateFinal && lastErr.status === 429)) continue;
          if (lastErr.code === 'not_primary' && i > 0 && notPrimary < NOT_PRIMARY_MAX) {
            // The first address failed for this client, yet the fallback
            // sees it live: back to it, after the pause the fallback asks for.
            notPrimary++;
            await sleep(Math.min(lastErr.retryAfterMs || NOT_PRIMARY_WAIT_MS, NOT_PRIMARY_MAX_WAIT_MS), this._abort.signal);
            if (this._stopped) throw lastErr;
            i = -1;
            continue;
          }
          if (lastErr.code !== 'wrong_node' && lastErr.code !== 'not_primary') break;
        }
      }
      if (rejoined || lastErr.status !== 401) throw lastErr;
      await this._rejoin(s, this.cfg.rejoinJitterMs);
      [s, rejoined] = [this._session, true];
    }
  }
}

// ---------------------------------------------------------------- replay

/**
 * Plays a recorded room's barrage in step with a video on demand that
 * carries program date times (the Go SDK's Player): each message is
 * dispatched ('message') when the playhead reaches its moment (playheadOf),
 * and seeks are followed both ways — back, and what lies after the new
 * position plays again; forward, and what was jumped over is not poured
 * out. A message is stored at or after its moment and at most 2 minutes
 * after (the ingest's oldest playhead), so the messages of a moment P are
 * in the segments of [P, P + 2 min]: that much, and PLAYHEAD.playerLeadMs
 * more, is kept read ahead of the playhead through the CDN. Never a message
 * a moderator took down: the room's takedowns.json is read first, and a
 * segment's td applies at once ('takedown' event for one already played).
 * An EventTarget; stats() has the client's playhead block.
 */
export class DanmakuReplay extends EventTarget {
  constructor(cfg) {
    super();
    if (!cfg?.cdnURL || !ROOM_RE.test(cfg.room ?? '') || typeof cfg.playhead !== 'function' ||
        (cfg.segmentMs !== undefined && !SEGMENT_DURATIONS.includes(cfg.segmentMs))) {
      throw new DanmakuError('config', `danmaku: a replay needs cdnURL, a valid room, a playhead function and a segmentMs of ${SEGMENT_DURATIONS} (or none: the manifest's)`);
    }
    this.cfg = { httpTimeoutMs: DEFAULTS.httpTimeoutMs, ...cfg, cdnURL: cfg.cdnURL.endsWith('/') ? cfg.cdnURL : `${cfg.cdnURL}/` };
    this._fetch = cfg.fetch ?? globalThis.fetch.bind(globalThis);
    this._now = cfg.now ?? (() => performance.now());
    this._abort = new AbortController();
    this._takedowns = new TakedownSet(Infinity);
    Object.assign(this, { _dur: cfg.segmentMs ?? 0, _listed: 0, _listOK: false, _idx: [], _seq: 0, _seen: null });
    Object.assign(this, { _loadTo: 0, _cursor: 0, _last: null, _started: false, _gen: 0, _loading: null, _timer: 0 });
    this._st = { played: 0, seeks: 0, segments: 0, skipped: 0, listErrors: 0 };
    this._skew = new SkewStats();
    this._mode = 'wall';
  }

  get _stopped() { return this._abort.signal.aborted; }
  _emit(type, detail) { this.dispatchEvent(new CustomEvent(type, { detail })); }

  /** Counters: played, seeks, segments, skipped (unreadable), listErrors; playhead as DanmakuClient's. */
  stats() { return { ...this._st, segmentMs: this._dur, playhead: this._skew.summary(this._mode, this._idx.length) }; }

  /** Reads the manifest (segment duration, takedown count) and follows the playhead until stop(). */
  async start() {
    if (this._running) throw new DanmakuError('running', 'danmaku: start() already called');
    this._running = true;
    const m = await this._json(manifestKey(this.cfg.room), MAX_MANIFEST_BYTES).catch(() => null);
    if (m && manifestSlot(m, this.cfg.room, m.dur) !== null) {
      this._listed = manifestTakedowns(m);
      if (!this._dur) this._dur = m.dur;
    }
    if (!this._dur) this._dur = 1000;
    if (!SEGMENT_DURATIONS.includes(this._dur)) throw new DanmakuError('bad_manifest', `danmaku: segment duration ${this._dur} ms is not one of ${SEGMENT_DURATIONS}`);
    this._loop();
  }

  stop() { this._abort.abort(); clearTimeout(this._timer); }

  _signal() { return AbortSignal.any([this._abort.signal, AbortSignal.timeout(this.cfg.httpTimeoutMs)]); }

  async _get(key, limit) {
    const resp = await this._fetch(this.cfg.cdnURL + key, { signal: this._signal() });
    if (resp.status !== 200) {
      resp.body?.cancel().catch(() => {});
      return { status: resp.status };
    }
    const body = new Uint8Array(await resp.arrayBuffer());
    if (body.byteLength > limit) throw bad(`${key} (too large)`);
    return { status: 200, body };
  }

  async _json(key, limit) {
    const r = await this._get(key, limit);
    if (r.status !== 200) return null;
    return JSON.parse(new TextDecoder().decode(r.body));
  }

  _loop() {
    if (this._stopped) return;
    this._step();
    this._timer = setTimeout(() => this._loop(), PLAYHEAD.tickMs);
  }

  // Reads the playhead once: follows a seek, reads ahead (in the
  // background), plays what is due.
  _step() {
    if (!this._listOK) {
      this._readList();
      return;
    }
    const ph = readPlayhead(this.cfg.playhead);
    if (ph === null) {
      // Nothing is played while the clock does not know.
      if (this._mode !== 'wall') this._skew.c.fallbacks++;
      this._mode = 'wall';
      return;
    }
    this._mode = 'playhead';
    const local = this._now();
    if (!this._started || this._jumped(ph, local)) {
      if (this._started) {
        this._st.seeks++;
        this._skew.c.jumps++;
      }
      this._seek(ph);
    }
    this._last = { ph, local };
    if (!this._loading) this._loading = this._readAhead(ph).finally(() => { this._loading = null; });
    this._play(ph);
  }

  // The room's takedown list, once (a missing one is an empty one); until
  // it is read nothing is played, so nothing taken down ever is.
  _readList() {
    if (this._loading) return;
    this._loading = (async () => {
      try {
        const o = await this._json(takedownListKey(this.cfg.room), MAX_TAKEDOWN_LIST_BYTES);
        const list = o === null ? { n: 0, ids: [] } : decodeTakedownList(o, this.cfg.room);
        this._applyTakedowns(list.ids);
        this._listOK = true;
      } catch {
        if (!this._stopped) this._st.listErrors++;
        await sleep(1000, this._abort.signal);
      }
    })().finally(() => { this._loading = null; });
  }

  _applyTakedowns(list) {
    for (const t of list) {
      if (!this._takedowns.add(identityOf(t.kind, t.id))) continue;
      const i = this._idx.findIndex((x) => identityOf(x.m.kind, x.m.id) === identityOf(t.kind, t.id));
      if (i >= 0) this._idx.splice(i, 1);
      this._emit('takedown', { id: t.id, kind: t.kind, via: 'replay', dequeued: i >= 0 });
    }
  }

  // A seek (or discontinuity) rather than playing on: the playhead moved
  // more than jumpMs more or less than the local clock.
  _jumped(ph, local) {
    const drift = (ph - this._last.ph) - (local - this._last.local);
    return Math.abs(drift) > PLAYHEAD.jumpMs;
  }

  // Plays from ph on, reading again from there (the CDN has the segments
  // cached): a seek back plays what lies after it again.
  _seek(ph) {
    this._started = true;
    this._gen++; // a read under way belongs to the old position
    this._cursor = ph - 1; // a message at exactly ph is played
    this._idx = [];
    this._seen = new SeenSet();
    this._loadTo = ph - (ph % this._dur);
  }

  async _readAhead(ph) {
    const dur = this._dur, gen = this._gen;
    const want = ph + PLAYHEAD.maxBehindMs + PLAYHEAD.playerLeadMs;
    // Never a slot that cannot be written yet (a replay trailing the show).
    const written = Math.floor((Date.now() - 2000) / dur);
    const from = this._loadTo / dur, to = Math.min(Math.floor(want / dur) + 1, from + PLAYHEAD.playerChunk, written);
    if (this._loadTo >= want || to <= from) return;
    const slots = [];
    for (let n = from; n < to; n++) slots.push(n);
    const got = await Promise.all(slots.map(async (n) => {
      try {
        return [n, await this._get(segmentKey(this.cfg.room, n, dur), MAX_SEGMENT_BYTES)];
      } catch {
        return [n, null];
      }
    }));
    if (this._stopped || gen !== this._gen) return;
    for (const [n, r] of got) {
      if (r?.status === 404) continue;
      let seg = null;
      try {
        if (r?.status === 200) seg = decodeSegment(r.body);
      } catch { /* counted below */ }
      if (!seg || !segmentMatches(seg, this.cfg.room, n, dur)) {
        this._st.skipped++;
        continue;
      }
      this._st.segments++;
      this._applyTakedowns(seg.takedowns);
      for (const w of seg.messages) {
        if (this._takedowns.has(identityOf(w.kind, w.id))) continue;
        const m = admit(this._seen, w, (n + 1) * dur);
        if (!m) continue;
        const at = playheadOf(m);
        if (at <= this._cursor) continue; // its moment passed before it was read
        this._idx.push({ at, seq: ++this._seq, m });
      }
    }
    this._idx.sort((a, b) => a.at - b.at || a.seq - b.seq);
    this._loadTo = to * dur;
  }

  // Dispatches, in order, the messages whose moment is in (cursor, ph],
  // once the segments read reach past ph (a read is under way after a
  // seek: the cursor waits for it, else what it brings would be passed).
  _play(ph) {
    if (this._loadTo <= ph) return;
    let n = 0;
    while (n < this._idx.length && this._idx[n].at <= ph) {
      const x = this._idx[n++];
      if (x.at <= this._cursor || this._takedowns.has(identityOf(x.m.kind, x.m.id))) continue;
      this._st.played++;
      this._skew.c.shown++;
      this._skew.observe(ph - x.at);
      this._emit('message', x.m);
    }
    this._idx.splice(0, n);
    this._cursor = Math.max(this._cursor, ph);
  }
}
