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
// "N new" count; its drops are the client render drops operators watch. It is
// safe for concurrent use (Push from the reading goroutine, Next from the UI).
//
// # Segment polling
//
// The poller starts at the server second in which the client joined, so it
// sees what is sent from then on. Segment S is requested only once it is due:
// server time ≥ (S+1)·1000 ms + publish_delay_ms, plus half the round trip of
// the entry request that set the clock offset, so that the uncertainty of the
// offset can never make the client early. A CDN may cache a 404, so asking
// early would hide a segment from every viewer behind that cache node. A 404
// for a due second is retried after Config.PollRetry; server and network
// errors back off. A client that falls more than Config.FarBehind behind live
// jumps to the newest second the manifest names — but only when that second,
// too, is more than FarBehind ahead: a slicer catching up after an outage is
// walked through, never skipped, and without a manifest nothing is skipped.
// The seconds a jump skips are counted in Stats.SkippedSeconds and their
// messages are not delivered (gifts among them that the edge sent are
// delivered all the same).
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
// second or more before the segment that holds it, and so before segment
// messages with smaller ids. There is no total order by id across the streams.
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
