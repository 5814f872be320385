// Rebuilds the vendored single-file bundles, so that nothing needs npm at
// run time:
//   vendor/msgpack.mjs  an ES module of @msgpack/msgpack, for the demo page
//                       served by `danmaku dev`;
//   vendor/hls.mjs      an ES module of hls.js's light build (HLS playback
//                       through Media Source Extensions, no subtitles, DRM
//                       or alternate audio), whose default export is Hls:
//                       the demo page plays the live test stream with it;
//   ../../internal/loadgen/htmlreport/vendor/chart.js
//                       Chart.js as a classic script (window.Chart), which
//                       `danmaku loadgen -html` inlines into its report so
//                       that the report needs no network to be read.
// Run from sdk/web after `npm ci`:  npm run vendor  (or node scripts/vendor.mjs)
// The output depends only on the locked versions of the packages and of
// esbuild, so running it again without an upgrade changes nothing.
import { build } from 'esbuild';
import { existsSync, readFileSync } from 'node:fs';

const root = new URL('..', import.meta.url).pathname;

// banner is the bundle's header: what it is, how it is made, and the
// licenses of the packages in it.
function banner(what, pkgs) {
  const parts = pkgs.map((name) => {
    const dir = new URL(`../node_modules/${name}/`, import.meta.url);
    const pkg = JSON.parse(readFileSync(new URL('package.json', dir)));
    const file = ['LICENSE', 'LICENSE.md'].find((f) => existsSync(new URL(f, dir)));
    const lic = readFileSync(new URL(file, dir), 'utf8').trim();
    return { head: `${pkg.name} ${pkg.version}`, lic };
  });
  const licenses = parts.map((p) => (parts.length > 1 ? `${p.head}:\n` : '') + p.lic).join('\n\n');
  return `/*! ${what === '' ? parts.map((p) => p.head).join(', ') : what} — bundled by sdk/web/scripts/vendor.mjs (npm run vendor); do not edit.
${licenses.split('\n').map((l) => ' * ' + l).join('\n').replace(/ +$/gm, '')}
 */`;
}

const common = {
  absWorkingDir: root,
  bundle: true,
  platform: 'browser',
  target: 'es2020',
  minify: true,
  legalComments: 'none', // the banner carries the licenses
  logLevel: 'info',
};

await build({
  ...common,
  entryPoints: ['@msgpack/msgpack'],
  format: 'esm',
  banner: { js: banner('', ['@msgpack/msgpack']) },
  outfile: 'vendor/msgpack.mjs',
});

// hls.js's light build is enough for the demo's single-rendition stream and
// is a third smaller than the full one.
await build({
  ...common,
  stdin: { contents: "export { default } from 'hls.js/light';\n", resolveDir: root, loader: 'js' },
  format: 'esm',
  banner: { js: banner('', ['hls.js']) },
  outfile: 'vendor/hls.mjs',
});

const chart = JSON.parse(readFileSync(new URL('../node_modules/chart.js/package.json', import.meta.url))).version;
await build({
  ...common,
  stdin: { contents: "import Chart from 'chart.js/auto';\nwindow.Chart = Chart;\n", resolveDir: root, loader: 'js' },
  format: 'iife',
  banner: { js: banner(`chart.js ${chart} with @kurkle/color`, ['chart.js', '@kurkle/color']) },
  outfile: '../../internal/loadgen/htmlreport/vendor/chart.js',
});
