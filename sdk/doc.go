// Package sdk is the viewer's client: the Go package apps embed (and, through
// a gomobile facade, the mobile SDK). A Client joins a room through the entry
// endpoint, keeps its clock in step with the server, polls the room's
// one-second segments from the CDN, holds the WebSocket to an edge for the
// gifts and system messages that must arrive fast, merges both streams into
// one de-duplicated channel, and throttles the viewer's own comments before
// they reach the ingest.
//
// # Lifecycle
//
// New checks the Config and starts nothing. Run joins the room and runs the
// client until its context is done; it may be called once. Messages returns
// the channel the merged stream is delivered on; it is closed when Run
// returns. Send, Announce, Entry and Stats may be called from any goroutine,
// before, during or after Run. Every method of Client is safe for concurrent
// use.
//
// A RenderQueue sits between Messages and the screen: 32 slots, 120 waiting
// (the oldest barrage dropped, never a gift), paused while hidden with an
// "N new" count, gifts folded into counts once a hidden queue is full of
// them; its drops are the client render drops operators watch. It is safe
// for concurrent use (Push from the reading goroutine, Next from the UI).
//
// The first join waits a random 0-3 s (Config.FirstJoinJitter): at show
// start a push notification opens millions of apps within a second.
//
// # Segment polling
//
// A room's segments each cover D ms of server time (Entry.SegmentMs: 1000,
// 500 or 250); slot n covers [n·D, (n+1)·D). The poller starts at the slot
// in which the client joined, so it sees what is sent from then on. Slot n
// is requested only once it is due: server time ≥ (n+1)·D +
// publish_delay_ms, plus the margin of the client's clock estimate, so that
// the estimate's uncertainty can never make the client early. A CDN may
// cache a 404, so asking early would hide a segment from every viewer
// behind that cache node; asking on time, the first request finds it.
//
// Server time is the clock that stamps message ids (the entry answer's
// server_time_ms). The client estimates it from the entry round trip and,
// when that was long, refines it with a few samples of GET /v1/time; the
// tightest estimate wins (Stats.ClockMarginMs).
//
// A 404 for a due slot is retried after min(Config.PollRetry, D/4); server
// and network errors back off. A segment that is another room's or slot's
// (a CDN serving a wrong object) is asked for again up to three times, then
// skipped. A due slot that stays 404 for a while makes the client read the
// manifest, which names the room's current duration: a room that changed it
// is followed at the same point in time. A client that falls more than
// Config.FarBehind behind live jumps to the newest slot the manifest names —
// but only when that slot, too, is more than FarBehind ahead: a slicer
// catching up after an outage is walked through, never skipped, and without
// a manifest nothing is skipped. The seconds a jump skips are counted in
// Stats.SkippedSeconds and their messages are not delivered (gifts among
// them that the edge sent are delivered all the same). An entry whose
// segment_ms this client has no key scheme for stops Run with
// ErrUnsupported.
//
// # Ordering and de-duplication
//
// The channel carries the union of two streams:
//
//   - Edge messages (gifts and system messages) are delivered as soon as their
//     frame arrives, in the order of the frame.
//   - Segment messages are delivered segment by segment in increasing second
//     (and so seq) order, each segment's messages in the order the segment
//     lists them; no message of a segment is delivered before every message of
//     the segments before it.
//
// The two streams interleave by arrival: an edge message usually arrives a
// segment or more before the segment that holds it, and so before segment
// messages with smaller ids. The fast lane is never held back to re-sort it
// among older comments (that would undo what it is for), so there is no
// total order by id across the streams; within each, the order is the
// room's: segments by slot and seq, messages by id.
//
// Every message id is delivered at most once while it is remembered (the
// last Config.SeenWindow of ids, at most Config.SeenIDs of them). A merged
// gift whose Merged ids were all delivered already is skipped; if only some
// were, it is delivered with Merged cut to the ids not yet delivered, Count
// cut to match when it stands for one gift per id, and, if its own id was
// among those delivered, the first remaining id as its ID.
//
// The channel is bounded (Config.MessageBuffer). When it is full a barrage
// message is dropped (Stats.DroppedBarrage); a gift or system message waits
// for room, holding back all delivery (and so the reading of further frames
// and segments) until the app reads, so gifts are never dropped by the
// client. A client held back long enough jumps to live, as above.
//
// # Sending
//
// Send applies the client-side layer of flow control: at most one comment is
// posted per Config.SendInterval (1.2 s), at most Config.SendQueue (5) wait,
// and a new one drops the oldest waiting; the same text again within
// Config.SendDedupWindow (10 s) reports success without being sent. Send
// returns once the text is queued; the posts happen in Run. Announce (hosts
// and admins) is posted at once and is not throttled.
package sdk
