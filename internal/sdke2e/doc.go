// Package sdke2e tests the SDK module (danmaku/sdk and danmaku/sdk/mobile)
// against the server's roles: the mobile facade end to end through every
// role of the pipeline, and replay from the origin. The SDK module cannot
// import the server's packages, so these tests live here; the SDK's unit
// tests, against fake servers, stay beside its code. The browser SDK's
// tests are in internal/sdkweb, beside the handler that serves it.
package sdke2e
