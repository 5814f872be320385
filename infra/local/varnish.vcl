# CDN stand-in for the local stack and the integration tests.
#
# This file is a template: @BACKEND_HOST@, @BACKEND_PORT@ and @BACKEND_PREFIX@
# are replaced before varnishd loads it (infra/local/cdn.sh with sed,
# internal/testenv with strings.Replace). The backend is the S3 server in
# path-style form, http://@BACKEND_HOST@:@BACKEND_PORT@@BACKEND_PREFIX@, so a
# client GETs CDN/key and Varnish fetches S3/bucket/key — the way a CDN in
# front of a bucket maps its paths.
#
# What it must do, like the production CDN:
#   - collapse concurrent misses for one key into one origin fetch (Varnish's
#     waiting list does this for any cacheable answer, the 404 included);
#   - cache 200 answers as their Cache-Control says (segments: a year,
#     immutable; the live manifest: max-age=1);
#   - cache the 404 of a second not yet written only sub-second, so a poller
#     sees the segment soon after it is written while a burst of pollers
#     still costs the origin one request.
vcl 4.1;

backend s3 {
    .host = "@BACKEND_HOST@";
    .port = "@BACKEND_PORT@";
    .connect_timeout = 2s;
    .first_byte_timeout = 10s;
    .between_bytes_timeout = 10s;
}

sub vcl_recv {
    # Readiness probe for scripts and tests; never reaches the origin.
    if (req.url == "/_cdn/health") {
        return (synth(200, "OK"));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (synth(405, "Method Not Allowed"));
    }
    # One cache object per key: query strings (cache busters, S3
    # sub-resources) are neither forwarded nor part of the cache key.
    set req.url = regsub(req.url, "\?.*$", "");
    # Keys never need escaping, and S3 decodes %2F: /rooms%2Fdemo%2Flive.json
    # would reach the manifest under a second cache key, where an old one
    # could outlive the new. A percent-escape is refused here, before the
    # cache, with the 404 the origin of embedded mode answers.
    if (req.url ~ "%") {
        return (synth(404, "Not Found"));
    }
    # Everything is public; credentials and cookies must not split the cache.
    unset req.http.Authorization;
    unset req.http.Cookie;
    return (hash);
}

sub vcl_backend_fetch {
    set bereq.url = "@BACKEND_PREFIX@" + bereq.url;
    set bereq.http.Host = "@BACKEND_HOST@:@BACKEND_PORT@";
}

sub vcl_backend_response {
    # No stale answers: a stale manifest would hold pollers on an old second.
    set beresp.grace = 0s;
    set beresp.keep = 0s;
    if (beresp.status != 200) {
        # 404 = a segment not written yet (403 if an origin hides missing
        # keys), 5xx = origin trouble. Pollers ask only once a segment is due,
        # so a 404 is rare; cached just long enough that a burst of early
        # pollers costs the origin one request per 50 ms, never long enough
        # to hide even a 250 ms segment once written.
        set beresp.ttl = 50ms;
        unset beresp.http.Set-Cookie;
        return (deliver);
    }
    # 200: the builtin logic applies Cache-Control (max-age / s-maxage).
}

sub vcl_deliver {
    # Tests and operators tell hits from misses without varnishlog.
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
    # The browser demo polls segments from another origin.
    set resp.http.Access-Control-Allow-Origin = "*";
}

sub vcl_synth {
    # vcl_recv's 404 for a percent-escape: the coded JSON error of
    # docs/api.md, as the origin of embedded mode answers it. vcl_deliver
    # does not run for synthetic answers, so CORS is set here too, or the
    # browser SDK could not read the error. (The spaces before the closing
    # braces keep "} out of the body: it would end the VCL long string.)
    if (resp.status == 404) {
        set resp.http.Content-Type = "application/json; charset=utf-8";
        set resp.http.Cache-Control = "no-cache";
        set resp.http.Access-Control-Allow-Origin = "*";
        set resp.body = {"{"error": {"code": "not_found", "message": "no such object: an object is asked for by its key as written, without percent-escapes" } }"};
        return (deliver);
    }
}
