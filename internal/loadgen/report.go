package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"danmaku/sdk"
)

// ReportVersion is the version of Report's JSON; it changes when a field
// changes meaning, not when one is added.
const ReportVersion = 1

// Report is what a run measured; `danmaku loadgen -json` writes it as is.
// Counts are this process's (its shard's), except Drops, which are the
// nodes' counters and so include every client of those nodes.
type Report struct {
	Version  int            `json:"version" merge:"derived"`
	Run      RunInfo        `json:"run"`
	Users    UsersReport    `json:"users"`
	Barrage  BarrageReport  `json:"barrage"`
	Gifts    GiftsReport    `json:"gifts"`
	Latency  Latencies      `json:"latency" merge:"derived"`
	Delivery DeliveryReport `json:"delivery"`
	Drops    DropsReport    `json:"drops" merge:"first"`
	// Timeline has one entry per second of the offer.
	Timeline []Second `json:"timeline"`
	// Nodes are the per-node figures read from the nodes' /metrics during
	// the offer and the drain. Every shard reads the same nodes: merged,
	// the first report's.
	Nodes NodesReport `json:"nodes" merge:"first"`
	// Histograms are the latency distributions behind Latency, bucket by
	// bucket, so that Merge combines processes into exact percentiles.
	Histograms Histograms `json:"histograms"`
	// Generator is the generator's own CPU; with Latency.GeneratorLag and
	// SendDelay it says whether the generator bound the run
	// (GeneratorBound).
	Generator GeneratorReport `json:"generator"`
	// NetworkErrors is the first raw text of each class of transport
	// failure the generator's requests met, by class ("eof": `Post
	// "http://…/v1/barrage": EOF`): the class of Barrage.Errors',
	// Gifts.Answers' and Users.EntryErrors' "network: eof" counts says who
	// gave up, its text why (an idle connection the server closed, a
	// reset, a timeout at either end). Merged: each class's text from the
	// first report that has one.
	NetworkErrors map[string]string `json:"network_errors,omitempty" merge:"union"`
}

// Histograms holds one HistogramData per Latencies field.
type Histograms struct {
	Entry       HistogramData `json:"entry"`
	BarragePost HistogramData `json:"barrage_post"`
	GiftPost    HistogramData `json:"gift_post"`
	BarrageE2E  HistogramData `json:"barrage_e2e"`
	GiftE2E     HistogramData `json:"gift_e2e"`
	SendDelay   HistogramData `json:"send_delay"`
	// GeneratorLag is how late the generator's lag probe fired.
	GeneratorLag HistogramData `json:"generator_lag"`
	// Entry cut in two (Latencies.EntryJoins, EntryOffer).
	EntryJoins HistogramData `json:"entry_joins"`
	EntryOffer HistogramData `json:"entry_offer"`
	// BarrageE2E cut in three (Latencies.BarrageSplit).
	BarrageToStore      HistogramData `json:"barrage_to_store"`
	BarrageToSlotEnd    HistogramData `json:"barrage_to_slot_end"`
	BarrageAfterSlotEnd HistogramData `json:"barrage_after_slot_end"`
}

// RunInfo says what was asked for (this shard's share of it) and when.
type RunInfo struct {
	ID     string `json:"id"` // tags the comments (" #ID.n") and order ids ("lg-ID-shard-n")
	GSLB   string `json:"gslb"`
	Room   string `json:"room"`
	Shard  int    `json:"shard" merge:"zero"`
	Shards int    `json:"shards" merge:"derived"`
	// Merged is how many shard reports Merge combined into this one (0:
	// one process's own report); rates and counts are then the whole run's.
	Merged int `json:"merged,omitempty" merge:"derived"`
	// Pattern is "steady" or "pulse"; Schedule says it in words.
	Pattern          string  `json:"pattern"`
	Schedule         string  `json:"schedule" merge:"derived"`
	RatePerSec       float64 `json:"rate_per_s"`
	PulsePeakPerSec  float64 `json:"pulse_peak_per_s,omitempty"`
	PulseRampSeconds float64 `json:"pulse_ramp_s,omitempty" merge:"first"`
	PulseHoldSeconds float64 `json:"pulse_hold_s,omitempty" merge:"first"` // 0: to the end
	DurationSeconds  float64 `json:"duration_s" merge:"first"`
	GiftRatePerSec   float64 `json:"gift_rate_per_s"`
	// Keyword is the lottery keyword some comments say (KeywordShare of
	// them), empty when every comment is a traced phrase.
	Keyword      string  `json:"keyword,omitempty"`
	KeywordShare float64 `json:"keyword_share,omitempty" merge:"first"`
	// Throttle is the client throttle per user ("1.2s"), or "off"
	// (-unthrottled); ThrottleCapPerSec the most comments/s the joined
	// users may post under it.
	Throttle          string  `json:"throttle"`
	ThrottleCapPerSec float64 `json:"throttle_cap_per_s,omitempty"`
	Concurrency       int     `json:"concurrency"`
	SegmentMs         int64   `json:"segment_ms" merge:"first"`
	// Start and End bound the whole run (joins and drain included);
	// LoadSeconds is how long the offer lasted.
	Start       time.Time `json:"start" merge:"min"`
	End         time.Time `json:"end" merge:"max"`
	LoadSeconds float64   `json:"load_s" merge:"max"`
	// Interrupted: the offer was ended early (Ctrl-C).
	Interrupted bool `json:"interrupted,omitempty"`
}

// UsersReport is the joining of the simulated users. When only gifts are
// offered, one user joins (to find the ingests) and the rest are names on
// the orders.
type UsersReport struct {
	Users       int     `json:"users"`
	Joined      int     `json:"joined"`
	JoinSeconds float64 `json:"join_s" merge:"max"`
	// JoinRatePerSec is the join rate offered (Config.JoinRate; 0: every
	// join at once), Joins the users' and pollers' joins that got an
	// entry, and JoinsPerSec what that made over JoinSeconds.
	JoinRatePerSec float64 `json:"join_rate_per_s,omitempty"`
	Joins          int64   `json:"joins"`
	JoinsPerSec    float64 `json:"joins_per_s" merge:"derived"`
	// Refreshes are entries fetched during the offer: a token near its
	// end, or refused (401).
	Refreshes int64 `json:"refreshes"`
	// EntryErrors are the failed entry requests, by "status code" or
	// "network: kind".
	EntryErrors map[string]int64 `json:"entry_errors,omitempty"`
	// EntryProbes are the entries fetched during the offer only to time
	// the entry endpoint (Config.EntryProbeEvery); their answers are
	// discarded.
	EntryProbes int64 `json:"entry_probes,omitempty"`
}

// joinPace says how fast users and pollers joined, against the rate
// offered.
func (u *UsersReport) joinPace() string {
	offered := "all at once"
	if u.JoinRatePerSec > 0 {
		offered = fmt.Sprintf("paced at %.1f/s", u.JoinRatePerSec)
	}
	return fmt.Sprintf("%d joins with pollers, %.1f/s, %s", u.Joins, u.JoinsPerSec, offered)
}

// deriveJoins fills JoinsPerSec.
func (u *UsersReport) deriveJoins() {
	u.JoinsPerSec = 0
	if u.JoinSeconds > 0 {
		u.JoinsPerSec = float64(u.Joins) / u.JoinSeconds
	}
}

// BarrageReport counts the comments. Due = HeldBack + NotOffered + NoEntry
// + Attempted, and Attempted = OK + the sum of Errors.
type BarrageReport struct {
	// Due is what the schedule asked for.
	Due int64 `json:"due"`
	// HeldBack were not sent: the user's client throttle would hold them.
	HeldBack int64 `json:"held_back"`
	// NotOffered were not sent: every worker was busy (the in-flight cap,
	// Concurrency, was reached: the server answered too slowly for the
	// rate, or the generator could not go faster).
	NotOffered int64 `json:"not_offered"`
	// NoEntry were not sent: the user's entry could not be re-fetched.
	NoEntry   int64 `json:"no_entry"`
	Attempted int64 `json:"attempted"`
	// OK were answered 200 {"ok":true}: stored or silently dropped, which
	// only Drops tells apart.
	OK int64 `json:"ok"`
	// KeywordOK are the keyword entries among OK (not traced end to end).
	KeywordOK int64 `json:"keyword_ok,omitempty"`
	// Errors are the other answers by "status code" ("503
	// backend_unavailable") and the failures by "network: kind".
	Errors          map[string]int64 `json:"errors"`
	AttemptedPerSec float64          `json:"attempted_per_s" merge:"derived"`
	OKPerSec        float64          `json:"ok_per_s" merge:"derived"`
	// PeakPerSec is the busiest second's attempted comments.
	PeakPerSec int64 `json:"peak_per_s" merge:"derived"`
}

// GiftsReport counts the gift orders. Orders = Accepted +
// DuplicateAfterRetry + DuplicateFirst + Failed; each accepted order was
// stored once when DuplicateFirst is 0 and Drops.Accepted["gift"] equals
// Accepted (the nodes counting no one else's gifts).
type GiftsReport struct {
	Orders     int64 `json:"orders"`
	NotOffered int64 `json:"not_offered"`
	Attempts   int64 `json:"attempts"`
	// Accepted were answered {"duplicate":false}: stored by that request.
	Accepted int64 `json:"accepted"`
	// DuplicateAfterRetry were answered duplicate on a retry: an earlier
	// try was stored but its answer lost. Accepted once, as designed.
	DuplicateAfterRetry int64 `json:"duplicate_after_retry"`
	// DuplicateFirst were answered duplicate on their first try: the order
	// id was not new. Never expected.
	DuplicateFirst int64 `json:"duplicate_first"`
	// Failed gave up after their tries.
	Failed int64 `json:"failed"`
	// Answers counts every try's answer: "200", "429 …", "503
	// backend_unavailable", "network: timeout".
	Answers  map[string]int64 `json:"answers"`
	OKPerSec float64          `json:"ok_per_s" merge:"derived"`
}

// Latencies are the distributions by kind, in milliseconds. The paced
// kinds (BarragePost, GiftPost) are measured from when the schedule made
// the request due, not from when it went out: a generator or server that
// falls behind shows it as latency (no coordinated omission); SendDelay
// says how much of it was the generator's own lateness.
type Latencies struct {
	// Entry is GET /v1/entry, answered (joins and refreshes).
	Entry Summary `json:"entry"`
	// EntryJoins are the users' entries while they join (at
	// Config.JoinRate with the pollers' joins, or all at once);
	// EntryOffer the probes and refreshes during the offer.
	EntryJoins Summary `json:"entry_joins"`
	EntryOffer Summary `json:"entry_offer"`
	// BarragePost is POST …/barrage, from its scheduled time to its answer
	// (any answer, or a network failure).
	BarragePost Summary `json:"barrage_post"`
	// GiftPost is one gift order, from its scheduled time to the answer of
	// its last try (retries included: what the business server waits).
	GiftPost Summary `json:"gift_post"`
	// BarrageE2E is an own comment's scheduled send to its decode by a
	// poller (segments through the CDN), per (poller, comment) — the
	// design's "send → decoded" — for comments answered 200.
	BarrageE2E Summary `json:"barrage_e2e"`
	// GiftE2E is an own gift's scheduled send to its decode by a poller
	// (the edge, if held, or the segments), per (poller, gift), for gifts
	// accepted.
	GiftE2E Summary `json:"gift_e2e"`
	// SendDelay is a comment's scheduled time to a worker taking it up:
	// above a few ms, the generator is the bottleneck.
	SendDelay Summary `json:"send_delay"`
	// GeneratorLag is how late a timer of 10 ms fired in the generator's
	// processes over the offer and the drain: above a few ms, they were
	// runnable and not run (the machine's CPU), and polled and sent late.
	GeneratorLag Summary `json:"generator_lag"`
	// BarrageSplit cuts each BarrageE2E delivery in three at the
	// comment's stream id (its append, by the store clock) and at its
	// slot's end.
	BarrageSplit BarrageSplit `json:"barrage_split"`
}

// BarrageSplit is where a comment's end-to-end time goes, per (poller,
// comment) as BarrageE2E: the three parts add up to it pair by pair, not
// percentile by percentile.
type BarrageSplit struct {
	// ToStore is the scheduled send to the append (the generator's
	// lateness, the POST, the ingest's flush window).
	ToStore Summary `json:"to_store"`
	// ToSlotEnd is the append to its slot's end: the wait for the
	// segment, from 0 to a segment's duration.
	ToSlotEnd Summary `json:"to_slot_end"`
	// AfterSlotEnd is the slot's end to the poller's decode: the publish
	// delay and the client's clock margin (when it asks), the slicer's
	// write if it comes later (a first poll missed), the fetch through
	// the CDN and the decode.
	AfterSlotEnd Summary `json:"after_slot_end"`
}

// DeliveryReport is what the pollers decoded of the generator's own
// traffic, and their SDK counters over the offer and the drain.
type DeliveryReport struct {
	Pollers int  `json:"pollers"`
	Joined  int  `json:"joined"`
	Edge    bool `json:"edge"`
	// JoinErrors are the pollers that are not joined at the report: the
	// SDK refused to start one (its error), one stopped ("stopped: " and
	// its error), or one is still fetching its entry ("not joined yet").
	JoinErrors map[string]int64 `json:"join_errors,omitempty"`
	// CommentsAccepted are the own comments answered 200; CommentsShown
	// those at least one poller decoded, CommentsShownByAll those every
	// poller did. Accepted but not shown: dropped by the ingest's flow
	// control, or sampled away by the slicer (its per-second budget
	// shows only so many) — Drops says which.
	CommentsAccepted   int64 `json:"comments_accepted"`
	CommentsShown      int64 `json:"comments_shown"`
	CommentsShownByAll int64 `json:"comments_shown_by_all"`
	// CommentDecodes are (poller, own comment) decodes.
	CommentDecodes int64 `json:"comment_decodes"`
	// DecodedUnanswered were decoded though their POST was not answered
	// 200 (stored, answer lost).
	DecodedUnanswered int64 `json:"decoded_unanswered"`
	// Untracked are decodes of the pollers the generator could not match
	// to their POSTs: decoded before the answer was read, with 100,000
	// such decodes already waiting. Not 0, the delivery counts (shown,
	// shown to every poller, pairs missing) are low by up to this many:
	// the generator lost track, which says nothing of the system.
	Untracked       int64 `json:"untracked,omitempty"`
	GiftsAccepted   int64 `json:"gifts_accepted"`
	GiftsShown      int64 `json:"gifts_shown"`
	GiftsShownByAll int64 `json:"gifts_shown_by_all"`
	// GiftPairsMissing are (poller, accepted gift) pairs where a poller
	// that is joined at the end of the drain never decoded the gift;
	// GiftPairsDoubled those where it decoded it more than once. Both are
	// 0 when every gift reached every viewer exactly once.
	GiftPairsMissing int64 `json:"gift_pairs_missing"`
	GiftPairsDoubled int64 `json:"gift_pairs_doubled"`
	// FirstPollHitRatio is FirstPollHits / SegmentsFetched: segments found
	// by their first request (the poll schedule's aim).
	SegmentsFetched   int64   `json:"segments_fetched"`
	FirstPollHits     int64   `json:"first_poll_hits"`
	FirstPollHitRatio float64 `json:"first_poll_hit_ratio" merge:"derived"`
	NotFoundRetries   int64   `json:"not_found_retries"`
	FetchErrors       int64   `json:"fetch_errors"`
	DecodeErrors      int64   `json:"decode_errors"`
	SeqGaps           int64   `json:"seq_gaps"`
	Duplicates        int64   `json:"duplicates"`
	// DroppedBarrage were dropped by a poller's SDK for a full channel:
	// the generator read too slowly. Never expected.
	DroppedBarrage   int64 `json:"dropped_barrage"`
	JumpsToLive      int64 `json:"jumps_to_live"`
	MaxSegmentLagMs  int64 `json:"max_segment_lag_ms" merge:"max"`
	MaxClockMarginMs int64 `json:"max_clock_margin_ms" merge:"max"`
}

// DropsReport is the difference of the nodes' counters from the start of
// the offer to the end of the drain, summed over Endpoints. They count
// every client of those nodes, not only this generator: run against an
// otherwise idle room and deployment (and, sharded, read one shard's).
type DropsReport struct {
	Endpoints       []string `json:"endpoints"`
	SlicerEndpoints []string `json:"slicer_endpoints,omitempty"`
	ScrapeErrors    []string `json:"scrape_errors,omitempty"`
	// CounterReset: a node restarted during the run; its figures are lower
	// bounds.
	CounterReset bool `json:"counter_reset,omitempty"`
	// Accepted is danmaku_ingest_accepted_total by kind: stored.
	Accepted map[string]int64 `json:"accepted"`
	// Rejected is danmaku_ingest_rejected_total by layer and reason;
	// layers "gateway" (user_bucket, room_bucket) and "antispam" are the
	// silent drops, answered 200.
	Rejected []Drop `json:"rejected"`
	// SilentDrops is the total of those silent layers.
	SilentDrops int64 `json:"silent_drops"`
	// BarrageUnaccounted is Barrage.OK minus stored barrage minus silent
	// drops: 0 when this generator was the nodes' only sender.
	BarrageUnaccounted int64 `json:"barrage_unaccounted"`
	// BucketOverflows is danmaku_ingest_bucket_overflow_total by bucket.
	BucketOverflows map[string]int64 `json:"bucket_overflows,omitempty"`
	// SlicerDropped is danmaku_slicer_dropped_total by reason (sampled:
	// over the segment's budget; superseded): stored, never shown.
	SlicerDropped map[string]int64 `json:"slicer_dropped,omitempty"`
	// SlicerShown is danmaku_slicer_segment_messages_total by queue.
	SlicerShown map[string]int64 `json:"slicer_shown,omitempty"`
	// Segments is danmaku_slicer_segments_total by outcome.
	Segments map[string]int64 `json:"segments,omitempty"`
	// IngestCounters are the increases of the ingest's other counters
	// (danmaku_ingest_*_total: duplicates dropped, words filtered, bans,
	// global limit, flushes…), keyed `name{labels}`.
	IngestCounters map[string]int64 `json:"ingest_counters,omitempty"`
}

// silentLayers are the layers of danmaku_ingest_rejected_total whose
// drops the ingest answers like stored comments (200 {"ok":true}): flow
// control at the gateway, and the anti-spam layer's duplicates.
var silentLayers = map[string]bool{"gateway": true, "antispam": true}

// Drop is one (layer, reason) counter's increase.
type Drop struct {
	Layer  string `json:"layer"`
	Reason string `json:"reason"`
	Count  int64  `json:"count"`
}

// Second is one second of the offer.
type Second struct {
	// T is the second's end, in seconds since the offer began.
	T          float64 `json:"t" merge:"max"`
	Due        int64   `json:"due"`
	Attempted  int64   `json:"attempted"`
	OK         int64   `json:"ok"`
	Errors     int64   `json:"errors"`
	HeldBack   int64   `json:"held_back"`
	NotOffered int64   `json:"not_offered"`
	GiftsOK    int64   `json:"gifts_ok"`
	// PostP50Ms and PostP99Ms are the comment POST latency of this second.
	// Merged, the worst shard's: per-second percentiles cannot be merged
	// without their histograms, and the worst is the honest bound.
	PostP50Ms float64 `json:"post_p50_ms" merge:"max"`
	PostP99Ms float64 `json:"post_p99_ms" merge:"max"`
	// Shown are the comments due in this second (answered 200) that at
	// least one poller decoded, counted after the drain: set against Due
	// and OK, the second's share that reached the viewers.
	Shown int64 `json:"shown"`
	// The end-to-end latencies of the comments (through the CDN) and
	// gifts (the edge, if held) decoded in this second, and of the entries
	// answered in it; merged, the worst shard's, as for PostP99Ms.
	BarrageE2EP50Ms float64 `json:"barrage_e2e_p50_ms,omitempty" merge:"max"`
	BarrageE2EP99Ms float64 `json:"barrage_e2e_p99_ms,omitempty" merge:"max"`
	GiftE2EP50Ms    float64 `json:"gift_e2e_p50_ms,omitempty" merge:"max"`
	GiftE2EP99Ms    float64 `json:"gift_e2e_p99_ms,omitempty" merge:"max"`
	EntryP50Ms      float64 `json:"entry_p50_ms,omitempty" merge:"max"`
	EntryP99Ms      float64 `json:"entry_p99_ms,omitempty" merge:"max"`
}

func (g *Generator) fillRun(r *Report) {
	c := &g.cfg
	r.Run = RunInfo{
		ID: c.RunID, GSLB: c.GSLB, Room: c.Room, Shard: c.Shard, Shards: c.Shards,
		Pattern: c.Pattern, Schedule: g.sched.String(), RatePerSec: g.sched.base,
		Keyword:         c.Keyword,
		DurationSeconds: c.Duration.Seconds(), GiftRatePerSec: g.gifts.base,
		Concurrency: c.Concurrency, Throttle: "off",
	}
	if g.sched.pulse {
		r.Run.PulsePeakPerSec, r.Run.PulseRampSeconds = g.sched.peak, c.PulseRamp.Seconds()
		r.Run.PulseHoldSeconds = c.PulseHold.Seconds()
	}
	if c.Keyword != "" {
		r.Run.KeywordShare = c.KeywordShare
	}
	if !c.Unthrottled {
		r.Run.Throttle = c.SendInterval.String()
	}
}

func (g *Generator) fillReport(r *Report, before, after sample, sb, sa sdk.Stats, endpoints []string) {
	c := &g.cfg
	load := max(r.Run.LoadSeconds, 1e-3)
	r.Run.SegmentMs = g.segmentMs.Load()
	if !c.Unthrottled {
		r.Run.ThrottleCapPerSec = float64(g.usersJoined) / c.SendInterval.Seconds()
	}
	r.Users = UsersReport{Users: g.usersTotal, Joined: g.usersJoined, JoinSeconds: r.Users.JoinSeconds,
		JoinRatePerSec: r.Users.JoinRatePerSec, Joins: r.Users.Joins, Refreshes: g.refreshes.Load(), EntryErrors: nonEmptyMap(g.entryErrs.snapshot()), EntryProbes: g.entryProbes.Load()}

	b := &r.Barrage
	b.Due, b.HeldBack, b.NotOffered, b.NoEntry = g.due.Load(), g.held.Load(), g.overrun.Load(), g.noEntry.Load()
	b.Attempted, b.OK, b.Errors = g.attempted.Load(), g.answeredOK.Load(), g.errs.snapshot()
	b.KeywordOK = g.keywordOK.Load()
	g.fillNetworkErrors(r)
	b.AttemptedPerSec, b.OKPerSec = float64(b.Attempted)/load, float64(b.OK)/load
	for _, s := range r.Timeline {
		b.PeakPerSec = max(b.PeakPerSec, s.Attempted)
	}

	gr := &r.Gifts
	gr.Orders, gr.NotOffered, gr.Attempts = g.giftOrders.Load(), g.giftOverrun.Load(), g.giftAttempts.Load()
	gr.Accepted, gr.DuplicateAfterRetry, gr.DuplicateFirst, gr.Failed = g.giftAccepted.Load(), g.giftDupRetry.Load(), g.giftDupFirst.Load(), g.giftFailed.Load()
	gr.Answers = g.giftStatus.snapshot()
	gr.OKPerSec = float64(gr.Accepted+gr.DuplicateAfterRetry) / load

	r.Histograms = Histograms{
		Entry: g.lat.entry.Data(), BarragePost: g.lat.post.Data(), GiftPost: g.lat.gift.Data(),
		BarrageE2E: g.lat.e2e.Data(), GiftE2E: g.lat.giftE2E.Data(), SendDelay: g.lat.sendDelay.Data(),
		GeneratorLag: g.lat.genLag.Data(),
		EntryJoins:   g.lat.entryJoin.Data(), EntryOffer: g.lat.entryOffer.Data(),
		BarrageToStore: g.lat.toStore.Data(), BarrageToSlotEnd: g.lat.toEnd.Data(), BarrageAfterSlotEnd: g.lat.afterEnd.Data(),
	}
	r.Latency = r.Histograms.latencies()

	g.fillDelivery(&r.Delivery, sb, sa)
	g.seqs.shownBySecond(g.nextSeq, g.loadStart, r.Timeline)

	g.fillDrops(&r.Drops, b, before, after, endpoints)
	if b.Errors == nil {
		b.Errors = map[string]int64{}
	}
	if r.Timeline == nil {
		r.Timeline = []Second{}
	}
}

// fillNetworkErrors copies the first text of each network error class.
func (g *Generator) fillNetworkErrors(r *Report) {
	g.netTexts.Range(func(k, v any) bool {
		if r.NetworkErrors == nil {
			r.NetworkErrors = map[string]string{}
		}
		r.NetworkErrors[k.(string)] = v.(string)
		return true
	})
}

// fillDrops fills dr with the nodes' counters' increase from before to
// after: accepted, rejected by layer and reason, the slicer's sampling and
// the ingest's own counters; b's admitted count is checked against them.
func (g *Generator) fillDrops(dr *DropsReport, b *BarrageReport, before, after sample, endpoints []string) {
	c := &g.cfg
	dr.Endpoints, dr.SlicerEndpoints = endpoints, c.SlicerMetrics
	dr.ScrapeErrors = append(before.errors, after.errors...)
	deltas, reset := delta(before, after)
	dr.CounterReset = reset
	dr.Accepted = map[string]int64{}
	by := func(fam, key string) map[string]int64 {
		m := map[string]int64{}
		for s, v := range deltas {
			if s.family == fam {
				m[s.label(key)] += int64(v)
			}
		}
		return nonEmptyMap(m)
	}
	if m := by(famAccepted, "kind"); m != nil {
		dr.Accepted = m
	}
	// By layer and reason, summed over the event and room labels.
	rejected := map[[2]string]int64{}
	for s, v := range deltas {
		if s.family == famRejected {
			rejected[[2]string{s.label("layer"), s.label("reason")}] += int64(v)
			if silentLayers[s.label("layer")] {
				dr.SilentDrops += int64(v)
			}
		}
	}
	for k, n := range rejected {
		dr.Rejected = append(dr.Rejected, Drop{Layer: k[0], Reason: k[1], Count: n})
	}
	sort.Slice(dr.Rejected, func(i, j int) bool {
		a, b := dr.Rejected[i], dr.Rejected[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Layer+a.Reason < b.Layer+b.Reason
	})
	if dr.Rejected == nil {
		dr.Rejected = []Drop{}
	}
	dr.BarrageUnaccounted = b.OK - dr.Accepted["barrage"] - dr.SilentDrops
	dr.BucketOverflows = by(famOverflow, "bucket")
	dr.SlicerDropped = by(famSampled, "reason")
	dr.SlicerShown = by(famShown, "queue")
	dr.Segments = by(famSegments, "outcome")
	for s, v := range deltas {
		switch s.family {
		case famRejected, famAccepted, famOverflow, famSampled, famShown, famSegments:
			continue
		}
		if strings.HasPrefix(s.family, "danmaku_ingest_") {
			if dr.IngestCounters == nil {
				dr.IngestCounters = map[string]int64{}
			}
			dr.IngestCounters[s.family+"{"+s.labels+"}"] += int64(v)
		}
	}
}

// fillDelivery fills d with what the pollers decoded and their SDK
// counters' increase from sb to sa.
func (g *Generator) fillDelivery(d *DeliveryReport, sb, sa sdk.Stats) {
	c := &g.cfg
	d.Pollers, d.Edge, d.JoinErrors = c.share(c.Pollers), c.PollerEdge, nonEmptyMap(g.pc.joinErrors.snapshot())
	joined := make([]bool, len(g.pollers))
	unjoined := map[string]int64{}
	for i, p := range g.pollers {
		select {
		case <-p.done:
			// A poller whose Run ended before the report gave up: say why.
			if p.runErr != nil && !errors.Is(p.runErr, context.Canceled) {
				msg := p.runErr.Error()
				if len(msg) > 80 {
					msg = msg[:80]
				}
				unjoined["stopped: "+msg]++
				continue
			}
		default:
		}
		if p.c.Entry().Token != "" {
			d.Joined++
			joined[i] = true
		} else {
			unjoined["not joined yet"]++
		}
	}
	if len(unjoined) > 0 {
		if d.JoinErrors == nil {
			d.JoinErrors = map[string]int64{}
		}
		for k, v := range unjoined {
			d.JoinErrors[k] += v
		}
	}
	d.CommentsAccepted, d.CommentsShown, d.CommentsShownByAll = g.seqs.tally(g.nextSeq, d.Joined)
	d.CommentDecodes, d.DecodedUnanswered, d.Untracked = g.pc.pairs.Load(), g.decodeUnacc.Load(), g.pendingOver.Load()
	g.giftMu.Lock()
	d.GiftsAccepted = int64(len(g.giftIDs))
	for _, s := range g.giftIDs {
		if s.seenBy > 0 {
			d.GiftsShown++
		}
		if d.Joined > 0 && s.seenBy >= d.Joined {
			d.GiftsShownByAll++
		}
		for i, ok := range joined {
			n := uint8(0)
			if i < len(s.perPoller) {
				n = s.perPoller[i]
			}
			switch {
			case ok && n == 0:
				d.GiftPairsMissing++
			case n > 1:
				d.GiftPairsDoubled++
			}
		}
	}
	g.giftMu.Unlock()
	d.SegmentsFetched = sa.SegmentsFetched - sb.SegmentsFetched
	d.FirstPollHits = sa.FirstPollHits - sb.FirstPollHits
	if d.SegmentsFetched > 0 {
		d.FirstPollHitRatio = float64(d.FirstPollHits) / float64(d.SegmentsFetched)
	}
	d.NotFoundRetries = sa.NotFoundRetries - sb.NotFoundRetries
	d.FetchErrors = sa.FetchErrors - sb.FetchErrors
	d.DecodeErrors = sa.DecodeErrors - sb.DecodeErrors
	d.SeqGaps = sa.SeqGaps - sb.SeqGaps
	d.Duplicates = sa.Duplicates - sb.Duplicates
	d.DroppedBarrage = sa.DroppedBarrage - sb.DroppedBarrage
	d.JumpsToLive = sa.JumpsToLive - sb.JumpsToLive
	d.MaxSegmentLagMs, d.MaxClockMarginMs = sa.LastSegmentLagMs, sa.ClockMarginMs
}

// latencies summarises the histograms.
func (h *Histograms) latencies() Latencies {
	sum := func(d HistogramData) Summary {
		var x Histogram
		x.Add(d)
		return x.Summary()
	}
	return Latencies{
		Entry: sum(h.Entry), EntryJoins: sum(h.EntryJoins), EntryOffer: sum(h.EntryOffer), BarragePost: sum(h.BarragePost), GiftPost: sum(h.GiftPost),
		BarrageE2E: sum(h.BarrageE2E), GiftE2E: sum(h.GiftE2E), SendDelay: sum(h.SendDelay),
		GeneratorLag: sum(h.GeneratorLag),
		BarrageSplit: BarrageSplit{ToStore: sum(h.BarrageToStore), ToSlotEnd: sum(h.BarrageToSlotEnd), AfterSlotEnd: sum(h.BarrageAfterSlotEnd)},
	}
}

func nonEmptyMap(m map[string]int64) map[string]int64 {
	if len(m) == 0 {
		return nil
	}
	return m
}

// progressLoop samples the counters once a second until done, writes the
// progress line and returns the timeline.
func (g *Generator) progressLoop(start time.Time, done <-chan struct{}) []Second {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var (
		line []Second
		prev Second
		last = start
	)
	take := func(now time.Time, show bool) {
		w := g.window.Swap(new(secondWindow))
		cur := Second{
			T:   now.Sub(start).Seconds(),
			Due: g.due.Load(), Attempted: g.attempted.Load(), OK: g.answeredOK.Load(), Errors: g.errs.total(),
			HeldBack: g.held.Load(), NotOffered: g.overrun.Load(), GiftsOK: g.giftAccepted.Load() + g.giftDupRetry.Load(),
		}
		s := Second{
			T: float64(now.Sub(start).Round(time.Millisecond)) / float64(time.Second), Due: cur.Due - prev.Due, Attempted: cur.Attempted - prev.Attempted,
			OK: cur.OK - prev.OK, Errors: cur.Errors - prev.Errors, HeldBack: cur.HeldBack - prev.HeldBack,
			NotOffered: cur.NotOffered - prev.NotOffered, GiftsOK: cur.GiftsOK - prev.GiftsOK,
			PostP50Ms: ms(w.post.Quantile(0.5)), PostP99Ms: ms(w.post.Quantile(0.99)),
			BarrageE2EP50Ms: ms(w.barrageE2E.Quantile(0.5)), BarrageE2EP99Ms: ms(w.barrageE2E.Quantile(0.99)),
			GiftE2EP50Ms: ms(w.giftE2E.Quantile(0.5)), GiftE2EP99Ms: ms(w.giftE2E.Quantile(0.99)),
			EntryP50Ms: ms(w.entry.Quantile(0.5)), EntryP99Ms: ms(w.entry.Quantile(0.99)),
		}
		prev = cur
		line = append(line, s)
		per := now.Sub(last).Seconds()
		last = now
		if !show {
			return
		}
		e2e := ""
		if n := g.lat.e2e.Count(); n > 0 {
			e2e = fmt.Sprintf(" | e2e %d p50 %v p99 %v", n, round(g.lat.e2e.Quantile(0.5)), round(g.lat.e2e.Quantile(0.99)))
		}
		g.progressf(false, "%5.0fs  sent %6.0f/s (due %6.0f/s)  ok %d  err %d  held %d  not offered %d | post p50 %v p99 %v | gifts %d%s",
			s.T, float64(s.Attempted)/per, float64(s.Due)/per, cur.OK, cur.Errors, cur.HeldBack, cur.NotOffered,
			round(g.lat.post.Quantile(0.5)), round(g.lat.post.Quantile(0.99)), cur.GiftsOK, e2e)
	}
	for {
		select {
		case now := <-t.C:
			take(now, true)
		case <-done:
			// The last part-second: its own entry when it is long enough
			// to give a rate, else folded into the last second, so that
			// the timeline always adds up to the totals.
			now := time.Now()
			if now.Sub(last) > 100*time.Millisecond || len(line) == 0 {
				take(now, true)
			} else {
				n := len(line)
				take(now, false)
				tail := line[n]
				line = line[:n]
				l := &line[n-1]
				l.T = tail.T
				l.Due += tail.Due
				l.Attempted += tail.Attempted
				l.OK += tail.OK
				l.Errors += tail.Errors
				l.HeldBack += tail.HeldBack
				l.NotOffered += tail.NotOffered
				l.GiftsOK += tail.GiftsOK
			}
			g.progressf(true, "")
			return line
		}
	}
}

// round shortens a duration for the progress line.
func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Microsecond)
}

var progressMu sync.Mutex

// progressf writes a progress line: in place on a terminal (ended with a
// newline when final), one line each otherwise.
func (g *Generator) progressf(final bool, format string, args ...any) {
	w := g.cfg.Progress
	if w == nil {
		return
	}
	progressMu.Lock()
	defer progressMu.Unlock()
	msg := fmt.Sprintf(format, args...)
	msg = strings.TrimSuffix(msg, "\n")
	if g.cfg.ProgressInPlace {
		if msg != "" {
			fmt.Fprint(w, "\r\033[K"+msg)
		}
		if final {
			fmt.Fprintln(w)
		}
		return
	}
	if msg != "" {
		fmt.Fprintln(w, msg)
	}
}

// WriteText writes the report for people: what was offered, what was
// answered, latencies by kind, drops by reason, delivery.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	ru := &r.Run
	who := "one process"
	switch {
	case ru.Merged > 0:
		who = fmt.Sprintf("%d processes merged", ru.Merged)
	case ru.Shards > 1:
		who = fmt.Sprintf("shard %d/%d", ru.Shard, ru.Shards)
	}
	p("danmaku loadgen %s: room %s via %s, %s, %s for %.0fs", ru.ID, ru.Room, ru.GSLB, who, ru.Schedule, ru.DurationSeconds)
	if ru.Interrupted {
		p(" (interrupted after %.1fs)", ru.LoadSeconds)
	}
	p("\n")
	if ru.Throttle == "off" {
		p("client throttle: off (-unthrottled): users post as often as the schedule asks\n")
	} else {
		p("client throttle: one comment per user per %s (the SDK's): at most %.0f/s from %d users\n", ru.Throttle, ru.ThrottleCapPerSec, r.Users.Joined)
	}

	u := &r.Users
	p("\nusers     %d/%d joined in %.1fs (%s), %d entries re-fetched%s\n", u.Joined, u.Users, u.JoinSeconds, u.joinPace(), u.Refreshes, countsSuffix("entry errors", u.EntryErrors))

	br := &r.Barrage
	p("barrage   due %d: attempted %d (%.0f/s, peak %d/s), answered ok %d (%.0f/s), errors %d%s\n",
		br.Due, br.Attempted, br.AttemptedPerSec, br.PeakPerSec, br.OK, br.OKPerSec, sum(br.Errors), countsSuffix("", br.Errors))
	if ru.Keyword != "" {
		p("          keyword %q in %.0f%% of comments: %d of the answered ok (not traced end to end)\n", ru.Keyword, 100*ru.KeywordShare, br.KeywordOK)
	}
	p("          not sent: %d held back by the client throttle, %d not offered (all %d workers busy), %d without an entry\n",
		br.HeldBack, br.NotOffered, ru.Concurrency, br.NoEntry)

	gr := &r.Gifts
	p("gifts     orders %d: accepted %d, duplicate after retry %d, duplicate on first try %d, failed %d; %d tries%s\n",
		gr.Orders, gr.Accepted, gr.DuplicateAfterRetry, gr.DuplicateFirst, gr.Failed, gr.Attempts, countsSuffix("answers", gr.Answers))

	p("\nlatency (ms)          count      p50      p90      p99      max\n")
	for _, l := range []struct {
		name string
		s    Summary
	}{
		{"entry", r.Latency.Entry}, {"  joins", r.Latency.EntryJoins}, {"  during the offer", r.Latency.EntryOffer}, {"barrage POST", r.Latency.BarragePost}, {"gift POST", r.Latency.GiftPost},
		{"barrage end-to-end", r.Latency.BarrageE2E},
		{"  send → store", r.Latency.BarrageSplit.ToStore}, {"  store → slot end", r.Latency.BarrageSplit.ToSlotEnd},
		{"  slot end → shown", r.Latency.BarrageSplit.AfterSlotEnd},
		{"gift end-to-end", r.Latency.GiftE2E}, {"send delay", r.Latency.SendDelay},
		{"generator lag", r.Latency.GeneratorLag},
	} {
		p("  %-18s %8d %8.1f %8.1f %8.1f %8.1f\n", l.name, l.s.Count, l.s.P50Ms, l.s.P90Ms, l.s.P99Ms, l.s.MaxMs)
	}

	ge := &r.Generator
	p("\ngenerator %d process(es): %.2f of %d cores busy over %.0fs", ge.Procs, ge.CPUCores, ge.MachineCores, ge.WindowSeconds)
	if why := r.GeneratorBound(); len(why) > 0 {
		p("; GENERATOR-BOUND, the figures above are the generator's, not the servers':\n")
		for _, w := range why {
			p("  - %s\n", w)
		}
	} else {
		p("; kept its schedule\n")
	}

	r.Drops.writeText(p)

	d := &r.Delivery
	if d.Pollers > 0 {
		mode := "segments through the CDN"
		if d.Edge {
			mode = "segments through the CDN, and the edge"
		}
		p("\ndelivery  %d/%d pollers (%s)%s\n", d.Joined, d.Pollers, mode, countsSuffix("join errors", d.JoinErrors))
		p("  own comments: %d answered ok, %d shown (%.1f%%), %d shown to every poller, %d decodes\n",
			d.CommentsAccepted, d.CommentsShown, pct(d.CommentsShown, d.CommentsAccepted), d.CommentsShownByAll, d.CommentDecodes)
		p("  own gifts:    %d accepted, %d shown, %d shown to every poller; (poller, gift) pairs missing %d, doubled %d\n", d.GiftsAccepted, d.GiftsShown, d.GiftsShownByAll, d.GiftPairsMissing, d.GiftPairsDoubled)
		p("  first-poll hits %.1f%% (%d/%d), 404 retries %d, fetch errors %d, decode errors %d, seq gaps %d, duplicates %d, dropped by the SDK %d\n",
			100*d.FirstPollHitRatio, d.FirstPollHits, d.SegmentsFetched, d.NotFoundRetries, d.FetchErrors, d.DecodeErrors, d.SeqGaps, d.Duplicates, d.DroppedBarrage)
		if d.DecodedUnanswered > 0 {
			p("  %d own comments decoded though their POST was not answered 200 (stored, answer lost)\n", d.DecodedUnanswered)
		}
		if d.Untracked > 0 {
			p("  %d decodes untracked (decoded before their answer was read, with too many waiting): the counts above are low by up to this many\n", d.Untracked)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeText writes the drops section of Report.WriteText with p.
func (r *DropsReport) writeText(p func(format string, args ...any)) {
	p("\ndrops     from /metrics of %s (deltas; every client of these nodes counts)\n", strings.Join(r.Endpoints, ", "))
	p("  stored%s\n", countsSuffix("", r.Accepted))
	if len(r.Rejected) == 0 {
		p("  rejected: none\n")
	}
	for _, d := range r.Rejected {
		note := ""
		if silentLayers[d.Layer] {
			note = " (silent: answered 200)"
		}
		p("  rejected %-8s %-20s %8d%s\n", d.Layer, d.Reason, d.Count, note)
	}
	if len(r.SlicerDropped) > 0 || len(r.SlicerShown) > 0 {
		notShown := countsSuffix("", r.SlicerDropped)
		if notShown == "" {
			notShown = " none"
		}
		p("  slicer: shown%s; not shown%s\n", countsSuffix("", r.SlicerShown), notShown)
	}
	if len(r.IngestCounters) > 0 {
		p("  other ingest counters%s\n", countsSuffix("", r.IngestCounters))
	}
	switch {
	case r.BarrageUnaccounted > 0:
		p("  %d answered-ok comments unaccounted for by stored + silent drops: other senders on these nodes, or other shards\n", r.BarrageUnaccounted)
	case r.BarrageUnaccounted < 0:
		p("  %d more comments stored or dropped than answered ok: answers lost (timeouts, resets), or other senders on these nodes\n", -r.BarrageUnaccounted)
	}
	for _, e := range r.ScrapeErrors {
		p("  scrape error: %s\n", e)
	}
	if r.CounterReset {
		p("  a node's counters were reset during the run (restart): figures are lower bounds\n")
	}
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// countsSuffix writes " (label: k n, k n)" with the largest first, or
// nothing for an empty map.
func countsSuffix(label string, m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	keys := slices.Collect(maps.Keys(m))
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if label == "" {
		return " (" + strings.Join(parts, ", ") + ")"
	}
	return " (" + label + ": " + strings.Join(parts, ", ") + ")"
}
