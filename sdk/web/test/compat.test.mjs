// The previous release's decoders against what today's servers write
// (internal/wireprev does the same for the Go SDK): apps keep an SDK for
// months, so it must read today's segments and frames — ignoring the playhead
// time `p` it does not know — and refuse a newer schema version with its
// 'version' error, never a throw of another kind or a half-read message.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encode } from '@msgpack/msgpack';
import * as prev from './fixtures/danmaku-prev.js';
import * as today from '../danmaku.js';

const messages = [
  { id: '1700000000123-0', k: 1, o: 123, u: 'u1', n: '小明', x: 'GOAL!!', p: 1699999988123 },
  { id: '1700000000456-1', k: 2, o: 456, u: 'u2', g: 'rocket', v: 500, c: 2, ids: ['1700000000456-1', '1700000000600-0'], p: 1699999990000 },
  { id: '1700000000999-3', k: 3, o: 999, x: '抽奖开始', r: 'host' },
];
const segment = (v) => encode({ v, room: 'room_42', t: 1700000000, seq: 7, dur: 250, ms: 1700000000000, m: messages, td: [{ id: '1699999999000-0', k: 1 }] });
const frame = (v) => encode({ v, room: 'room_42', m: messages });

test('the previous SDK reads today\'s segments and frames, ignoring the playhead time', () => {
  for (const decoded of [prev.decodeSegment(segment(2)).messages, prev.decodeFrame(frame(1)).messages]) {
    assert.deepEqual(decoded.map((m) => [m.id, m.kind, m.text, m.gift, m.count]), [
      ['1700000000123-0', 1, 'GOAL!!', '', 1],
      ['1700000000456-1', 2, '', 'rocket', 2],
      ['1700000000999-3', 3, '抽奖开始', '', 1],
    ]);
  }
});

test('the previous SDK refuses a newer schema version with its version error', () => {
  for (const [what, fn] of [['segment', () => prev.decodeSegment(segment(3))], ['frame', () => prev.decodeFrame(frame(3))]]) {
    assert.throws(fn, (e) => e instanceof prev.DanmakuError && e.code === 'version', what);
  }
  // A manifest of a newer version is not used (null), as a missing one.
  assert.equal(prev.manifestSlot({ v: 3, room: 'room_42', t: 1700000000, seq: 7, dur: 250, ms: 1700000000000 }, 'room_42', 250), null);
  // Today's SDK refuses the version after its own in the same way.
  assert.throws(() => today.decodeSegment(segment(today.MAX_VERSION + 1)), (e) => e.code === 'version');
  assert.equal(today.manifestSlot({ v: today.MAX_VERSION + 1, room: 'room_42', t: 1700000000, seq: 7, dur: 250, ms: 1700000000000 }, 'room_42', 250), null);
});
