// Rebuilds vendor/msgpack.mjs: a single-file ES module of @msgpack/msgpack,
// so that the demo page served by `danmaku dev` needs no npm at run time.
// Run from sdk/web after `npm ci`:  npm run vendor  (or node scripts/vendor.mjs)
// The output depends only on the locked versions of @msgpack/msgpack and
// esbuild, so running it again without an upgrade changes nothing.
import { build } from 'esbuild';
import { readFileSync } from 'node:fs';

const pkg = JSON.parse(readFileSync(new URL('../node_modules/@msgpack/msgpack/package.json', import.meta.url)));
const license = readFileSync(new URL('../node_modules/@msgpack/msgpack/LICENSE', import.meta.url), 'utf8').trim();

const banner = `/*! @msgpack/msgpack ${pkg.version} — bundled by sdk/web/scripts/vendor.mjs (npm run vendor); do not edit.
${license.split('\n').map((l) => ' * ' + l).join('\n').replace(/ +$/gm, '')}
 */`;

await build({
  entryPoints: ['@msgpack/msgpack'],
  absWorkingDir: new URL('..', import.meta.url).pathname,
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: 'es2020',
  minify: true,
  legalComments: 'none', // the banner carries the license
  banner: { js: banner },
  outfile: 'vendor/msgpack.mjs',
  logLevel: 'info',
});
