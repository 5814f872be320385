// Runs refuse-escapes.js (the CloudFront Function of segments.tf) on sample
// viewer requests: test.sh runs it with node. The function is plain
// ECMAScript 5.1 with no imports, so node evaluates it as CloudFront does.
import { readFileSync } from 'node:fs';
import assert from 'node:assert/strict';

const src = readFileSync(new URL('../refuse-escapes.js', import.meta.url), 'utf8');
const handler = new Function(`${src}\nreturn handler;`)();

const event = (uri) => ({ version: '1.0', context: { eventType: 'viewer-request' }, request: { method: 'GET', uri, querystring: {}, headers: {}, cookies: {} } });

for (const uri of ['/rooms/demo/live.json', '/rooms/demo/s/1766606400.msgpack', '/tour/rooms/demo/ms/1766606400250.msgpack']) {
    const ev = event(uri);
    assert.equal(handler(ev), ev.request, `${uri}: passed on unchanged`);
}
for (const uri of ['/rooms%2Fdemo%2Flive.json', '/rooms%2fdemo%2flive.json', '/rooms/de%6Do/live.json', '/rooms/demo/s/1.msgpack%00', '/%']) {
    const res = handler(event(uri));
    assert.equal(res.statusCode, 404, `${uri}: status`);
    assert.equal(res.headers['content-type'].value, 'application/json; charset=utf-8', `${uri}: content-type`);
    assert.equal(res.body.encoding, 'text');
    const body = JSON.parse(res.body.data);
    assert.equal(body.error.code, 'not_found', `${uri}: code`);
    assert.ok(body.error.message, `${uri}: message`);
}
console.log('refuse-escapes.js: ok');
