// Package ingest is the upload path: viewers' barrage, host/admin
// announcements and the business servers' idempotent gift API. Barrage passes
// layered flow control (DESIGN.md): the dynamic token, bound to this node and
// the room; body limits and text normalisation; a per-user token bucket kept
// locally and exactly (the token binds the user to this node); and a per-room
// bucket shared across ingest nodes whose capacity follows the room's online
// count. Barrage over a limit gets the same success answer as stored barrage
// (silent drop), and every drop is counted by layer and reason. Gifts and
// announcements skip the buckets and are never silently dropped. A gift goes
// through a GiftLog, which appends it and records its order id in one atomic
// step, so one order id gives one stream entry whatever fails, and a
// business server may retry any failed call.
//
// A Server is safe for concurrent use.
package ingest
