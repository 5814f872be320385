// Renders a dashboard of infra/observability/dashboards the way Grafana
// lays it out — its rows and panels on a 24-column grid, each panel's
// queries over the last RANGE seconds from a Prometheus HTTP API — into a
// page of SVG charts, and screenshots it with Debian's chromium through
// playwright-core (sdk/web's node_modules: bash sdk/web/deps.sh). For
// docs/, where Grafana itself cannot be installed.
//
//   node infra/observability/render/render.mjs DASHBOARD.json OUT.png
// Env: PROMETHEUS (default http://127.0.0.1:9090), RANGE (seconds, default
// 600), STEP (seconds, default 5), DANMAKU_CHROMIUM (default
// /usr/bin/chromium), EVENT and ROOM (regexps for the show's $event and
// $room, default .*: every room).
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, '../../../sdk/web/package.json'));
const { chromium } = require('playwright-core');

const [dashFile, out] = process.argv.slice(2);
if (!dashFile || !out) {
  console.error('usage: node render.mjs DASHBOARD.json OUT.png');
  process.exit(2);
}
const prom = (process.env.PROMETHEUS ?? 'http://127.0.0.1:9090').replace(/\/+$/, '');
const range = Number(process.env.RANGE ?? 600);
const step = Number(process.env.STEP ?? 5);
const dash = JSON.parse(readFileSync(dashFile, 'utf8'));
// The variables as "All"; the interval as Grafana's default.
const vars = (e) => e.replaceAll('$__rate_interval', '1m').replaceAll('$role', '.*').replaceAll('$instance', '.*')
  .replaceAll('$event', process.env.EVENT ?? '.*').replaceAll('$room', process.env.ROOM ?? '.*');

const end = Math.floor(Date.now() / 1000);
const start = end - range;
async function queryRange(expr) {
  const u = `${prom}/api/v1/query_range?${new URLSearchParams({ query: vars(expr), start, end, step })}`;
  const r = await fetch(u);
  const body = await r.json();
  if (body.status !== 'success') throw new Error(`${expr}: ${body.error}`);
  return body.data.result;
}
const legend = (fmt, labels) => (fmt || '{{__name__}}').replace(/\{\{\s*(\w+)\s*\}\}/g, (_, k) => labels[k] ?? '');

const units = {
  s: (v) => (Math.abs(v) < 1 ? `${(v * 1000).toFixed(v < 0.01 ? 1 : 0)} ms` : `${v.toFixed(2)} s`),
  reqps: (v) => `${v >= 100 ? v.toFixed(0) : v >= 1 || v === 0 ? v.toFixed(1) : v.toFixed(3)}/s`,
  percentunit: (v) => `${(v * 100).toFixed(v > 0.999 ? 2 : 1)} %`,
  bytes: (v) => (v >= 1 << 20 ? `${(v / (1 << 20)).toFixed(1)} MiB` : v >= 1024 ? `${(v / 1024).toFixed(1)} KiB` : `${v.toFixed(0)} B`),
  short: (v) => (Math.abs(v) >= 1000 ? `${(v / 1000).toFixed(1)}k` : Number.isInteger(v) ? `${v}` : v.toFixed(2)),
};
const palette = ['#73bf69', '#f2cc0c', '#8ab8ff', '#ff780a', '#f2495c', '#5794f2', '#b877d9', '#705da0', '#37872d', '#fade2a'];
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);

function chart(series, unit, w, h) {
  const fmt = units[unit] ?? units.short;
  const pts = series.flatMap((s) => s.values);
  if (pts.length === 0) return `<div class="empty">No data</div>`;
  let lo = Math.min(0, ...pts.map((p) => p[1])), hi = Math.max(...pts.map((p) => p[1]));
  if (hi === lo) hi = lo + 1;
  const L = 58, R = 8, T = 6, B = 20, W = w - L - R, H = h - T - B;
  const x = (t) => L + ((t - start) / (end - start)) * W;
  const y = (v) => T + H - ((v - lo) / (hi - lo)) * H;
  let svg = `<svg width="${w}" height="${h}">`;
  for (let i = 0; i <= 4; i++) {
    const v = lo + ((hi - lo) * i) / 4;
    svg += `<line x1="${L}" x2="${L + W}" y1="${y(v)}" y2="${y(v)}" class="grid"/><text x="${L - 4}" y="${y(v) + 4}" class="tick" text-anchor="end">${esc(fmt(v))}</text>`;
  }
  const ticks = w < 500 ? 2 : 4; // time labels that fit the panel's width
  for (let i = 0; i <= ticks; i++) {
    const t = start + ((end - start) * i) / ticks;
    const d = new Date(t * 1000);
    const anchor = i === 0 ? 'start' : i === ticks ? 'end' : 'middle';
    svg += `<text x="${x(t)}" y="${h - 4}" class="tick" text-anchor="${anchor}">${d.toISOString().slice(11, 19)}</text>`;
  }
  series.forEach((s, i) => {
    const p = s.values.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
    svg += `<polyline points="${p}" fill="none" stroke="${palette[i % palette.length]}" stroke-width="1.6"/>`;
  });
  return svg + '</svg>';
}

const COL = 60, ROW = 32; // px per grid unit, as Grafana at 1440 px wide
let html = '';
for (const p of dash.panels) {
  const g = p.gridPos;
  const style = `left:${g.x * COL}px;top:${g.y * ROW}px;width:${g.w * COL - 8}px;height:${g.h * ROW - 8}px`;
  if (p.type === 'row') {
    html += `<div class="row" style="${style}">${esc(p.title)}</div>`;
    continue;
  }
  const series = [];
  for (const tg of p.targets ?? []) {
    for (const r of await queryRange(tg.expr)) {
      series.push({
        name: legend(tg.legendFormat, r.metric),
        values: r.values.map(([t, v]) => [t, Number(v)]).filter(([, v]) => Number.isFinite(v)),
      });
    }
  }
  const unit = p.fieldConfig?.defaults?.unit ?? 'short';
  const fmt = units[unit] ?? units.short;
  let body;
  if (p.type === 'stat') {
    const last = series.map((s) => s.values.at(-1)?.[1]).filter((v) => v !== undefined);
    body = last.length ? `<div class="stat">${esc(fmt(last.reduce((a, b) => a + b, 0)))}</div>` : `<div class="empty">No data</div>`;
  } else {
    body = chart(series, unit, g.w * COL - 24, g.h * ROW - 64);
    body += `<div class="legend">${series.map((s, i) => `<span><i style="background:${palette[i % palette.length]}"></i>${esc(s.name)}</span>`).join('')}</div>`;
  }
  html += `<div class="panel" style="${style}"><div class="title">${esc(p.title)}</div>${body}</div>`;
}
const height = Math.max(...dash.panels.map((p) => (p.gridPos.y + p.gridPos.h) * ROW)) + 60;
const page = `<!doctype html><meta charset="utf-8"><style>
body{margin:0;background:#111217;color:#ccccdc;font:12px/1.3 Inter,Helvetica,Arial,sans-serif}
header{height:44px;display:flex;align-items:center;padding:0 12px;font-size:16px;color:#fff;gap:12px}
header small{color:#8e8e8e;font-size:12px}
main{position:relative;margin:0 8px}
.panel{position:absolute;background:#181b1f;border:1px solid #2c3235;border-radius:3px;padding:6px 8px;box-sizing:border-box;overflow:hidden}
.row{position:absolute;font-size:14px;color:#fff;font-weight:500;padding-top:8px}
.title{font-weight:500;color:#fff;margin-bottom:4px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.stat{font-size:44px;color:#73bf69;font-weight:500;text-align:center;margin-top:30px}
.empty{color:#8e8e8e;text-align:center;margin-top:40px}
.grid{stroke:#2c3235;stroke-width:1}.tick{fill:#8e8e8e;font-size:10px}
.legend{display:flex;flex-wrap:wrap;gap:2px 12px;font-size:11px}.legend i{display:inline-block;width:12px;height:3px;margin-right:4px;vertical-align:middle}
</style><header>${esc(dash.title)} <small>last ${Math.round(range / 60)} min · ${esc(prom)} · rendered from ${esc(dashFile.split('/').pop())}</small></header><main>${html}</main>`;

const dir = mkdtempSync(join(tmpdir(), 'danmaku-render-'));
const ctx = await chromium.launchPersistentContext(dir, {
  executablePath: process.env.DANMAKU_CHROMIUM ?? '/usr/bin/chromium', headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
  viewport: { width: 24 * COL + 16, height },
});
try {
  const pg = ctx.pages()[0] ?? (await ctx.newPage());
  await pg.setContent(page);
  await pg.screenshot({ path: out, fullPage: true });
  console.log(`render: ${out} (${dash.panels.length} panels)`);
} finally {
  await ctx.close();
  rmSync(dir, { recursive: true, force: true });
}
