// Draws the rehearsal report's charts from the report inlined as JSON
// (#report-data) with the inlined Chart.js. No network: everything is in
// the page. When every chart is drawn, body[data-charts] holds their count
// (the browser test waits for it).
(function () {
  'use strict';
  const r = JSON.parse(document.getElementById('report-data').textContent);
  const line = r.timeline || [];
  const nodes = (r.nodes && r.nodes.nodes) || [];
  const palette = ['#0969da', '#1a7f37', '#bf8700', '#cf222e', '#8250df', '#1b7c83', '#bc4c00', '#57606a'];
  const color = (i) => palette[i % palette.length];

  Chart.defaults.animation = false;
  Chart.defaults.responsive = true;
  Chart.defaults.maintainAspectRatio = false;
  Chart.defaults.font.size = 11;
  Chart.defaults.plugins.legend.labels.boxWidth = 12;

  const xs = () => ({ type: 'linear', title: { display: true, text: 'seconds into the offer' }, min: 0, ticks: { precision: 0 } });
  const pts = (rows, x, y) => rows.map((s) => ({ x: x(s), y: y(s) }));
  const series = (label, data, i, extra) => Object.assign({ label, data, borderColor: color(i), backgroundColor: color(i), pointRadius: 0, borderWidth: 1.5, tension: 0 }, extra || {});
  const drawn = [];
  const draw = (id, cfg) => { drawn.push(new Chart(document.getElementById(id), cfg)); };

  // Per second: a second's counts are over the interval that ends at T.
  const per = (s, n, i) => { const dt = i === 0 ? s.t : s.t - line[i - 1].t; return dt > 0 ? n / dt : 0; };
  // Admitted: the ingests' stored comments, summed over the nodes sampled
  // at the same instants.
  const admitted = [];
  nodes.forEach((n) => (n.samples || []).forEach((s, k) => {
    if (!s.ok) return;
    if (!admitted[k]) admitted[k] = { x: s.t, y: 0 };
    admitted[k].y += s.admitted_per_s;
  }));
  draw('c-comments', {
    type: 'line',
    data: { datasets: [
      series('offered (due)', line.map((s, i) => ({ x: s.t, y: per(s, s.due, i) })), 0),
      series('sent', line.map((s, i) => ({ x: s.t, y: per(s, s.attempted, i) })), 7, { borderDash: [4, 3] }),
      series('answered ok', line.map((s, i) => ({ x: s.t, y: per(s, s.ok, i) })), 2),
      series('admitted (stored, nodes)', admitted.filter(Boolean), 1),
      series('shown (by due second)', line.map((s, i) => ({ x: s.t, y: per(s, s.shown, i) })), 4),
    ] },
    options: { scales: { x: xs(), y: { beginAtZero: true, title: { display: true, text: 'comments/s' } } } },
  });

  const lat = (label, key, i, dash) => series(label, line.filter((s) => s[key] > 0).map((s) => ({ x: s.t, y: s[key] })), i, dash ? { borderDash: [4, 3] } : {});
  draw('c-latency', {
    type: 'line',
    data: { datasets: [
      lat('barrage via CDN p99', 'barrage_e2e_p99_ms', 0), lat('barrage via CDN p50', 'barrage_e2e_p50_ms', 0, true),
      lat('gifts p99', 'gift_e2e_p99_ms', 3), lat('gifts p50', 'gift_e2e_p50_ms', 3, true),
      lat('entry p99', 'entry_p99_ms', 1), lat('entry p50', 'entry_p50_ms', 1, true),
      lat('barrage POST p99', 'post_p99_ms', 2),
    ] },
    options: { scales: { x: xs(), y: { type: 'logarithmic', title: { display: true, text: 'ms' } } } },
  });

  const bars = (id, labels, values, i, axis) => draw(id, {
    type: 'bar',
    data: { labels: labels.length ? labels : ['none'], datasets: [{ label: 'count', data: labels.length ? values : [0], backgroundColor: labels.map((_, k) => color(i + k)) }] },
    options: { indexAxis: axis || 'y', plugins: { legend: { display: false } }, scales: { x: { beginAtZero: true }, y: { beginAtZero: true } } },
  });
  const drops = r.drops || {};
  const dl = [], dv = [];
  (drops.rejected || []).forEach((d) => { dl.push(`${d.layer}: ${d.reason}${d.layer === 'gateway' || d.layer === 'antispam' ? ' (silent)' : ''}`); dv.push(d.count); });
  Object.entries(drops.slicer_dropped || {}).sort((a, b) => b[1] - a[1]).forEach(([k, v]) => { dl.push(`slicer: ${k} (not shown)`); dv.push(v); });
  Object.entries(drops.bucket_overflows || {}).sort((a, b) => b[1] - a[1]).forEach(([k, v]) => { dl.push(`bucket overflow: ${k}`); dv.push(v); });
  bars('c-drops', dl, dv, 3);

  const g = r.gifts || {}, d = r.delivery || {};
  bars('c-gifts', ['orders', 'accepted', 'duplicate after retry', 'failed', 'shown to a poller', 'shown to every poller'],
    [g.orders, g.accepted, g.duplicate_after_retry, g.failed, d.gifts_shown, d.gifts_shown_by_all], 0, 'x');

  const el = [], ev = [];
  const errs = (prefix, m, skip) => Object.entries(m || {}).filter(([k]) => !skip || !skip(k)).sort((a, b) => b[1] - a[1]).forEach(([k, v]) => { el.push(`${prefix} ${k}`); ev.push(v); });
  errs('barrage', (r.barrage || {}).errors);
  errs('gift', g.answers, (k) => k === '200');
  errs('entry', (r.users || {}).entry_errors);
  bars('c-errors', el, ev, 3);

  const perNode = (key) => nodes.map((n, i) => series(n.endpoint, (n.samples || []).filter((s) => s.ok).map((s) => ({ x: s.t, y: s[key] })), i));
  draw('c-cpu', { type: 'line', data: { datasets: perNode('cpu_cores') }, options: { scales: { x: xs(), y: { beginAtZero: true, title: { display: true, text: 'cores' } } } } });
  const rates = [];
  nodes.forEach((n, i) => [['admitted/s', 'admitted_per_s'], ['edge frames/s', 'edge_frames_per_s'], ['entries/s', 'entries_per_s']].forEach(([what, key], j) => {
    const data = (n.samples || []).filter((s) => s.ok).map((s) => ({ x: s.t, y: s[key] }));
    if (data.some((p) => p.y > 0)) rates.push(series(`${n.endpoint} ${what}`, data, i * 3 + j));
  }));
  draw('c-node-rates', { type: 'line', data: { datasets: rates }, options: { scales: { x: xs(), y: { type: 'logarithmic', title: { display: true, text: 'per second' } } } } });
  const mem = perNode('rss_mib');
  nodes.forEach((n, i) => {
    const data = (n.samples || []).filter((s) => s.ok).map((s) => ({ x: s.t, y: s.edge_connections }));
    if (data.some((p) => p.y > 0)) mem.push(series(`${n.endpoint} edge connections`, data, i + 4, { yAxisID: 'conns', borderDash: [4, 3] }));
  });
  draw('c-rss', { type: 'line', data: { datasets: mem }, options: { scales: { x: xs(), y: { beginAtZero: true, title: { display: true, text: 'MiB' } }, conns: { position: 'right', beginAtZero: true, grid: { drawOnChartArea: false }, title: { display: true, text: 'connections' } } } } });

  document.body.dataset.charts = String(drawn.length);
})();
