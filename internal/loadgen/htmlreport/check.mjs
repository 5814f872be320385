// Opens a report written by `danmaku loadgen -html` in headless chromium
// (Debian's, through sdk/web's playwright-core and its launcher) and checks
// it as a reader would get it: every chart drawn (a canvas with pixels),
// no console or page error, no network request. Prints the result as one
// JSON line and exits 1 when a check fails.
//   node internal/loadgen/htmlreport/check.mjs REPORT.html [SCREENSHOT.png]
// (needs `bash sdk/web/deps.sh`; --fonts for Chinese text in a screenshot)
import { launch } from '../../../sdk/web/test/lib.mjs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [file, shot] = process.argv.slice(2);
if (!file) {
  console.error('usage: node check.mjs REPORT.html [SCREENSHOT.png]');
  process.exit(2);
}
const url = pathToFileURL(resolve(file)).href;
const b = await launch({ viewport: { width: 1280, height: 900 } });
const requests = [];
try {
  // Anything but the page itself is a request the report must not make:
  // recorded, and refused so that it cannot succeed either.
  await b.context.route('**/*', (route) => {
    if (route.request().url() === url) return route.continue();
    requests.push(route.request().url());
    return route.abort();
  });
  b.page.on('request', (req) => { if (req.url() !== url && !requests.includes(req.url())) requests.push(req.url()); });
  await b.page.goto(url, { waitUntil: 'load' });
  await b.page.waitForFunction(() => document.body.dataset.charts !== undefined, null, { timeout: 90_000 });
  const res = await b.page.evaluate(() => {
    const canvases = [...document.querySelectorAll('canvas')];
    const drawn = canvases.filter((c) => {
      if (!c.width || !c.height) return false;
      const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      for (let i = 3; i < px.length; i += 4) if (px[i] !== 0) return true;
      return false;
    });
    return {
      canvases: canvases.length, drawn: drawn.length, charts: Number(document.body.dataset.charts),
      verdict: document.querySelector('.verdict')?.textContent, blank: canvases.filter((c) => !drawn.includes(c)).map((c) => c.id),
    };
  });
  if (shot) await b.page.screenshot({ path: shot, fullPage: true });
  const out = { ...res, errors: b.errors, requests };
  console.log(JSON.stringify(out));
  const ok = out.canvases > 0 && out.drawn === out.canvases && out.charts === out.canvases && out.errors.length === 0 && out.requests.length === 0;
  process.exitCode = ok ? 0 : 1;
} finally {
  await b.close();
}
