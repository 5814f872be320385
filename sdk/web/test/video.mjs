// The demo page with video (internal/sdkweb TestBrowserVideo): against a
// stack serving dev's live HLS test stream, the page plays it (the video's
// currentTime advances, hls.js's playingDate is set and follows the clock),
// the delay control moves it from about 3 s to about 15 s behind live and
// back, replay seeks a minute back (or to the playlist's start), comments
// posted meanwhile reach the stage, and the page logs no error.
// With DANMAKU_VIDEO=none the stack serves no video (404 no_video): the page
// shows the plain stage, says so, and the barrage runs by the wall clock.
// DANMAKU_SCREENSHOT=path saves the page with video and barrage.
//   node sdk/web/test/video.mjs      (env as test/browser.mjs)
import { launch, env, provision, viewer, sendGift, until, sleep, failed } from './lib.mjs';

const noVideo = process.env.DANMAKU_VIDEO === 'none';
const shot = process.env.DANMAKU_SCREENSHOT;
const room = `video-${Math.random().toString(36).slice(2, 8)}`;
await provision(room);
const guard = setTimeout(() => { console.error('video: hung; giving up'); process.exit(2); }, 240e3);

const ok = (what) => console.log(`ok - ${what}`);
const b = await launch({ viewport: { width: 1280, height: 900 } });
const { page } = b;
const state = () => page.evaluate(() => window.danmakuDemo.video());
const stats = () => page.evaluate(() => window.danmakuDemo.stats());

// Posts n numbered comments from node-side viewers (one each: the ingest's
// per-user bucket) and waits until the page has shown them all.
async function comments(users, label) {
  const before = await page.evaluate(() => window.danmakuDemo.stats().render?.shown ?? 0);
  await Promise.all(users.map((u, i) => u.comment(`${label} ${i + 1} 🎸`)));
  await until(`${label}: the ${users.length} comments on the stage`,
    () => page.evaluate((n) => (window.danmakuDemo.stats().render?.shown ?? 0) >= n, before + users.length), 60000);
}

try {
  await page.goto(`${env.gslb}/?room=${room}&user=watcher&delay=3`);
  await until('the page to join', () => page.evaluate(() => window.danmakuDemo?.client?.entry != null));
  const users = await Promise.all(['mia', 'kenji', 'lena', 'omar', 'yuki', 'sam'].map((u) => viewer(room, u)));

  if (noVideo) {
    const why = await until('the page to say why there is no video', () => page.evaluate(() => window.danmakuDemo.videoError()));
    if (!/no_video/.test(why)) throw new Error(`the page says ${JSON.stringify(why)}, want no_video`);
    const v = await page.evaluate(() => ({
      video: window.danmakuDemo.video(), videoHidden: document.getElementById('video').hidden,
      placeholder: !document.getElementById('novideo').hidden, bar: !document.getElementById('videobar').hidden,
    }));
    if (v.video !== null || !v.videoHidden || !v.placeholder || v.bar) throw new Error(`the fallback stage: ${JSON.stringify(v)}`);
    ok(`no video: the page says "${why}" and shows the plain stage`);
    await comments(users, 'wall');
    const s = await stats();
    if (s.playhead && s.playhead.mode !== 'off') throw new Error(`the client's playhead mode is ${s.playhead.mode} without video, want off`);
    ok(`comments reach the stage by the wall clock (playhead mode ${s.playhead?.mode ?? 'n/a: the SDK has none'})`);
  } else {
    // It plays: currentTime advances and the program date time follows
    // the clock (on the page's own clock: never a window on it).
    const v0 = await until('the video to play', async () => { const v = await state(); return v?.playingDate > 0 && v.currentTime > 0 && v; }, 60000);
    const v1 = await until('the video to advance', async () => { const v = await state(); return v.currentTime > v0.currentTime + 1 && v; }, 30000);
    if (!(v1.playingDate > v0.playingDate)) throw new Error(`playingDate ${v0.playingDate} → ${v1.playingDate}: not advancing`);
    if (!(v1.width > 0 && v1.height > 0)) throw new Error(`no picture: ${v1.width}×${v1.height}`);
    ok(`video plays: currentTime ${v0.currentTime.toFixed(1)} → ${v1.currentTime.toFixed(1)} s, playingDate +${v1.playingDate - v0.playingDate} ms, ${v1.width}×${v1.height}`);

    // The delay control. hls.js's latency (the live edge minus the frame
    // on screen) settles between the target and the page's drift bound
    // (3 s more, where hls.js seeks back to the target). The wait has no bound on speed, only a
    // hang guard: a loaded machine may take longer to buffer.
    const settle = async (delay) => until(`the video to sit ${delay} s behind the live edge`, async () => {
      const v = await state();
      return v && !v.paused && v.delay === delay && v.latency > delay - 1.5 && v.latency < delay + 3.5 && Number.isFinite(v.behindMs) && v;
    }, 90000);
    const at3 = await settle(3);
    ok(`delay 3 s: latency ${at3.latency.toFixed(1)} s, ${(at3.behindMs / 1000).toFixed(1)} s behind live`);
    // 15 s needs 15 s of stream: dev's stream starts with the stack.
    await until('15 s of stream in the playlist', () => page.evaluate(() => {
      const s = document.getElementById('video').seekable;
      return s.length > 0 && s.end(0) - s.start(0) > 17;
    }), 60000);
    await page.selectOption('#delay', '15');
    const at15 = await settle(15);
    if (!(at15.behindMs > at3.behindMs + 8000)) throw new Error(`15 s behind: ${at15.behindMs} ms, at 3 s: ${at3.behindMs} ms`);
    ok(`delay 15 s: latency ${at15.latency.toFixed(1)} s, ${(at15.behindMs / 1000).toFixed(1)} s behind live`);
    await comments(users, 'fifteen');
    let s = await stats();
    if (s.playhead) ok(`comments shown 15 s behind: playhead mode ${s.playhead.mode}, skew p50 ${s.playhead.skewP50Ms} ms p99 ${s.playhead.skewP99Ms} ms, late ${s.playhead.late}`);
    else ok('comments shown 15 s behind (the SDK has no playhead yet: by the wall clock)');
    await page.selectOption('#delay', '3');
    const back = await settle(3);
    ok(`back to 3 s: latency ${back.latency.toFixed(1)} s, ${(back.behindMs / 1000).toFixed(1)} s behind live`);

    // Replay: a minute back (or the playlist's start), the native controls
    // shown, sending off; back to live after.
    await page.click('#replay');
    const rp = await until('the replay to play', async () => {
      const v = await state();
      return v.replaying && !v.paused && v.behindMs > at15.behindMs && v;
    }, 60000);
    const r = await page.evaluate(() => ({ controls: document.getElementById('video').controls, sendOff: document.getElementById('send').disabled, replay: window.danmakuDemo.replayStats() }));
    if (!r.controls || !r.sendOff) throw new Error(`replay mode: ${JSON.stringify(r)}`);
    ok(`replay: ${(rp.behindMs / 1000).toFixed(1)} s behind live, controls shown, sending off${r.replay ? '' : ' (the SDK has no DanmakuReplay yet)'}`);
    if (r.replay) {
      // The comments posted 15 s behind, a minute or less ago, come again
      // from the recorded segments when the video reaches them.
      const played = await until('the replay to show the comments posted before', () => page.evaluate((n) => {
        const st = window.danmakuDemo.replayStats();
        return st.played >= n && st;
      }, users.length), 120000);
      ok(`replay played ${played.played} recorded messages: playhead mode ${played.playhead.mode}, skew p50 ${played.playhead.skewP50Ms} ms p99 ${played.playhead.skewP99Ms} ms, late ${played.playhead.late}`);
    }
    await page.click('#live');
    const live = await settle(3);
    if (live.replaying) throw new Error('still replaying after "back to live"');
    ok(`back to live: ${(live.behindMs / 1000).toFixed(1)} s behind`);

    if (shot) {
      // Comments of the lengths and scripts a room mixes, a gift, then the picture.
      const phrases = ['666', 'encore!!', 'this guitar solo 🔥🔥🔥', '前方高能', 'who else is watching from Berlin?', '好听', 'the drummer is insane', 'lights 😍', '太棒了！', '👏👏👏'];
      const crowd = await Promise.all(phrases.map((_, i) => viewer(room, `fan${i}`)));
      const before = (await stats()).render.shown;
      for (const [i, u] of crowd.entries()) { // spread over a few seconds: across the stage, not one column
        await u.comment(phrases[i]);
        await sleep(400);
      }
      await sendGift(users[0].entry.ingest[0], { order_id: `${room}-rose`, room, user: 'mia', nick: 'Mia', gift: 'rose', value: 100, count: 3 });
      await until('the crowd on the stage', () => page.evaluate((n) => window.danmakuDemo.stats().render.shown >= n, before + phrases.length + 1), 60000);
      await sleep(500);
      await page.screenshot({ path: shot });
      console.log(`screenshot: ${shot}`);
    }
    s = await stats();
    console.log(`status: ${await page.textContent('#status')}`);
    console.log(`video: ${await page.textContent('#videoinfo')}`);
  }
  if (b.errors.length) throw new Error(`page errors: ${b.errors.join(' | ')}`);
  ok('no console error');
} catch (err) {
  await failed(b, err, () => page.evaluate(() => ({ ...window.danmakuDemo.stats(), video: window.danmakuDemo.video(), videoError: window.danmakuDemo.videoError() })));
} finally {
  await b.close();
  clearTimeout(guard);
}
