package sdk

import (
	"sync/atomic"

	"danmaku/sdk/wire"
)

// Stats are the client's counters since New. Fields are int64 so that the
// struct binds to mobile languages as it is.
type Stats struct {
	// EntryFetches counts requests to the entry endpoint.
	EntryFetches int64

	// SegmentsFetched counts segments received (decodable or not).
	SegmentsFetched int64
	// FirstPollHits counts segments whose first request found them: the
	// poll schedule's aim. SegmentsFetched - FirstPollHits asked early (or
	// got a wrong object first).
	FirstPollHits int64
	// NotFoundRetries counts 404 answers for due segments, each retried.
	NotFoundRetries int64
	// MismatchRetries counts segments asked for again because the answer
	// was another room's or another slot's.
	MismatchRetries int64
	// LastSegmentLagMs is how long after its end (server clock) the last
	// segment was decoded: a comment sent at the start of that segment
	// waited this plus the segment's duration.
	LastSegmentLagMs int64
	// ClockMarginMs is the uncertainty of the server-clock estimate (half
	// the round trip of the entry request it came from): every poll waits
	// this much past a segment's due time so as never to ask early.
	ClockMarginMs int64
	// FetchErrors counts CDN requests that failed (network errors, 5xx,
	// unexpected statuses); each is retried after a back-off.
	FetchErrors int64
	// DecodeErrors counts segments that did not decode, or did not belong
	// to the slot and room asked for after MismatchRetries; each is skipped.
	DecodeErrors int64
	// SeqGaps counts segments whose seq was not the previous one plus one.
	SeqGaps int64
	// JumpsToLive counts jumps to live after falling FarBehind behind.
	JumpsToLive int64
	// SkippedSeconds counts the seconds those jumps skipped (whole seconds,
	// whatever the segment duration).
	SkippedSeconds int64

	// EdgeConnects counts WebSocket connections established.
	EdgeConnects int64
	// EdgeReconnects counts connections established after the first.
	EdgeReconnects int64
	// EdgeDialErrors counts failed WebSocket dials.
	EdgeDialErrors int64
	// EdgeBanned is 1 once an edge closed the connection because an
	// operator banned this user (CloseBanned): the client holds no edge
	// connection from then on (the segments still show the room) and its
	// comments are dropped. A count, as every field, for mobile bindings.
	EdgeBanned int64
	// EdgeFrames counts frames received from the edge.
	EdgeFrames int64
	// EdgeDecodeErrors counts edge frames that did not decode; each is skipped.
	EdgeDecodeErrors int64
	// EdgeTokenAsks counts the edge's asks for a fresh token (the
	// connection's expires soon); each is answered in-band.
	EdgeTokenAsks int64

	// Delivered counts messages put on the Messages channel.
	Delivered int64
	// Duplicates counts messages skipped because their id (or every id a
	// merged gift stands for) was already delivered.
	Duplicates int64
	// DroppedBarrage counts barrage dropped because the Messages channel was
	// full.
	DroppedBarrage int64

	// TakedownsApplied counts takedowns this client learned (from edge
	// frames, segments and the room's takedown list), each once.
	TakedownsApplied int64
	// TakedownNotices counts KindTakedown notices delivered: takedowns of
	// messages this client had delivered, which the app removes from the
	// screen.
	TakedownNotices int64
	// TakedownsSuppressed counts copies of taken-down messages not
	// delivered (a segment's copy after the edge's takedown, a late
	// joiner's old segment).
	TakedownsSuppressed int64
	// TakedownLists counts requests for the room's takedown list;
	// TakedownListErrors those that failed (each retried after a second).
	TakedownLists      int64
	TakedownListErrors int64

	// SendsPosted counts comments posted to the ingest with a success answer.
	SendsPosted int64
	// SendsDeduped counts comments answered with success without being sent
	// (the same text within SendDedupWindow).
	SendsDeduped int64
	// SendsDropped counts queued comments dropped for a newer one.
	SendsDropped int64
	// SendsHeldBack counts comments that had to wait for SendInterval.
	SendsHeldBack int64
	// SendsFailed counts comments the ingest refused or could not be reached
	// for; they are not retried.
	SendsFailed int64
}

type counters struct {
	entryFetches atomic.Int64

	segmentsFetched  atomic.Int64
	notFound         atomic.Int64
	firstPollHits    atomic.Int64
	mismatchRetries  atomic.Int64
	lastSegmentLagMs atomic.Int64
	fetchErrors      atomic.Int64
	decodeErrors     atomic.Int64
	seqGaps          atomic.Int64
	jumps            atomic.Int64
	skipped          atomic.Int64

	edgeConnects     atomic.Int64
	edgeReconnects   atomic.Int64
	edgeDialErrors   atomic.Int64
	edgeFrames       atomic.Int64
	edgeDecodeErrors atomic.Int64
	tokenAsks        atomic.Int64
	banned           atomic.Int64

	delivered      atomic.Int64
	duplicates     atomic.Int64
	droppedBarrage atomic.Int64

	takedowns          atomic.Int64
	takedownNotices    atomic.Int64
	takedownSuppressed atomic.Int64
	takedownLists      atomic.Int64
	takedownListErrors atomic.Int64
	// latency counts the barrage delivered to the app by end-to-end
	// latency (wire.LatencyBoundsMs): what the report's "lat" carries. Not
	// in Stats, whose fields must bind to mobile languages.
	latency [wire.LatencyBuckets]atomic.Int64

	sendsPosted   atomic.Int64
	sendsDeduped  atomic.Int64
	sendsDropped  atomic.Int64
	sendsHeldBack atomic.Int64
	sendsFailed   atomic.Int64
}

// Stats returns a snapshot of the counters. Each field is read atomically;
// the snapshot as a whole is not.
func (c *Client) Stats() Stats {
	s := &c.stats
	return Stats{
		EntryFetches:     s.entryFetches.Load(),
		SegmentsFetched:  s.segmentsFetched.Load(),
		NotFoundRetries:  s.notFound.Load(),
		FirstPollHits:    s.firstPollHits.Load(),
		MismatchRetries:  s.mismatchRetries.Load(),
		LastSegmentLagMs: s.lastSegmentLagMs.Load(),
		ClockMarginMs:    c.clockMargin().Milliseconds(),
		FetchErrors:      s.fetchErrors.Load(),
		DecodeErrors:     s.decodeErrors.Load(),
		SeqGaps:          s.seqGaps.Load(),
		JumpsToLive:      s.jumps.Load(),
		SkippedSeconds:   s.skipped.Load(),
		EdgeConnects:     s.edgeConnects.Load(),
		EdgeReconnects:   s.edgeReconnects.Load(),
		EdgeBanned:       s.banned.Load(),
		EdgeDialErrors:   s.edgeDialErrors.Load(),
		EdgeFrames:       s.edgeFrames.Load(),
		EdgeDecodeErrors: s.edgeDecodeErrors.Load(),
		EdgeTokenAsks:    s.tokenAsks.Load(),
		Delivered:        s.delivered.Load(),
		Duplicates:       s.duplicates.Load(),
		DroppedBarrage:   s.droppedBarrage.Load(),

		TakedownsApplied:    s.takedowns.Load(),
		TakedownNotices:     s.takedownNotices.Load(),
		TakedownsSuppressed: s.takedownSuppressed.Load(),
		TakedownLists:       s.takedownLists.Load(),
		TakedownListErrors:  s.takedownListErrors.Load(),
		SendsPosted:         s.sendsPosted.Load(),
		SendsDeduped:        s.sendsDeduped.Load(),
		SendsDropped:        s.sendsDropped.Load(),
		SendsHeldBack:       s.sendsHeldBack.Load(),
		SendsFailed:         s.sendsFailed.Load(),
	}
}
