// CloudFront Function (viewer-request, cloudfront-js-2.0) of segments.tf.
//
// Keys never need escaping (room ids are A-Z a-z 0-9 _ -), and S3 decodes
// %2F: /rooms%2Fdemo%2Flive.json would reach the manifest under a second
// cache key, where an old manifest could outlive the new one. A path with
// a percent-escape is therefore refused before the cache, with the coded
// 404 of docs/api.md that the origin of embedded mode answers.
function handler(event) {
    var request = event.request;
    if (request.uri.indexOf('%') === -1) {
        return request;
    }
    return {
        statusCode: 404,
        statusDescription: 'Not Found',
        headers: {
            'content-type': { value: 'application/json; charset=utf-8' },
            'cache-control': { value: 'no-cache' }
        },
        body: {
            encoding: 'text',
            data: '{"error":{"code":"not_found","message":"no such object: an object is asked for by its key as written, without percent-escapes"}}'
        }
    };
}
