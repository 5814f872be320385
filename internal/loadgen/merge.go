package loadgen

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Merge combines the reports of the shards of one run (`-shard i/n` in n
// processes, or `danmaku loadgen -procs n`) into the report of the whole
// run: counts and rates add up, latencies come from the merged histograms
// (exact percentiles, not averages), the timeline adds up second by
// second. Drops are the nodes' own counters, which every shard read from
// the same nodes: they are taken from the first report, not added, and
// BarrageUnaccounted is recomputed against the whole run's answers.
// "Shown by all" counts a comment that every poller of its own shard
// decoded (a shard knows only its own pollers).
func Merge(rs []*Report) (*Report, error) {
	if len(rs) == 0 {
		return nil, errors.New("loadgen: merge: no reports")
	}
	for i, r := range rs {
		if r == nil {
			return nil, fmt.Errorf("loadgen: merge: report %d is missing", i)
		}
		if r.Version != ReportVersion {
			return nil, fmt.Errorf("loadgen: merge: report %d has version %d, want %d", i, r.Version, ReportVersion)
		}
	}
	out := &Report{Version: ReportVersion, Run: rs[0].Run, Drops: rs[0].Drops}
	ru := &out.Run
	ru.Shard, ru.Shards, ru.Merged = 0, len(rs), len(rs)
	ru.RatePerSec, ru.PulsePeakPerSec, ru.GiftRatePerSec, ru.ThrottleCapPerSec, ru.Concurrency = 0, 0, 0, 0, 0
	var hs [6]Histogram
	hist := func(h *Histograms) [6]*HistogramData {
		return [6]*HistogramData{&h.Entry, &h.BarragePost, &h.GiftPost, &h.BarrageE2E, &h.GiftE2E, &h.SendDelay}
	}
	for _, r := range rs {
		q := &r.Run
		ru.RatePerSec += q.RatePerSec
		ru.PulsePeakPerSec += q.PulsePeakPerSec
		ru.GiftRatePerSec += q.GiftRatePerSec
		ru.ThrottleCapPerSec += q.ThrottleCapPerSec
		ru.Concurrency += q.Concurrency
		if q.Start.Before(ru.Start) {
			ru.Start = q.Start
		}
		if q.End.After(ru.End) {
			ru.End = q.End
		}
		ru.LoadSeconds = max(ru.LoadSeconds, q.LoadSeconds)
		ru.Interrupted = ru.Interrupted || q.Interrupted

		u := &out.Users
		u.Users += r.Users.Users
		u.Joined += r.Users.Joined
		u.JoinSeconds = max(u.JoinSeconds, r.Users.JoinSeconds)
		u.Refreshes += r.Users.Refreshes
		u.EntryErrors = addCounts(u.EntryErrors, r.Users.EntryErrors)

		b, rb := &out.Barrage, &r.Barrage
		b.Due += rb.Due
		b.HeldBack += rb.HeldBack
		b.NotOffered += rb.NotOffered
		b.NoEntry += rb.NoEntry
		b.Attempted += rb.Attempted
		b.OK += rb.OK
		b.KeywordOK += rb.KeywordOK
		b.Errors = addCounts(b.Errors, rb.Errors)

		gr, rg := &out.Gifts, &r.Gifts
		gr.Orders += rg.Orders
		gr.NotOffered += rg.NotOffered
		gr.Attempts += rg.Attempts
		gr.Accepted += rg.Accepted
		gr.DuplicateAfterRetry += rg.DuplicateAfterRetry
		gr.DuplicateFirst += rg.DuplicateFirst
		gr.Failed += rg.Failed
		gr.Answers = addCounts(gr.Answers, rg.Answers)

		d, rd := &out.Delivery, &r.Delivery
		d.Pollers += rd.Pollers
		d.Joined += rd.Joined
		d.Edge = d.Edge || rd.Edge
		d.JoinErrors = addCounts(d.JoinErrors, rd.JoinErrors)
		d.CommentsAccepted += rd.CommentsAccepted
		d.CommentsShown += rd.CommentsShown
		d.CommentsShownByAll += rd.CommentsShownByAll
		d.CommentDecodes += rd.CommentDecodes
		d.DecodedUnanswered += rd.DecodedUnanswered
		d.GiftsAccepted += rd.GiftsAccepted
		d.GiftsShown += rd.GiftsShown
		d.GiftsShownByAll += rd.GiftsShownByAll
		d.SegmentsFetched += rd.SegmentsFetched
		d.FirstPollHits += rd.FirstPollHits
		d.NotFoundRetries += rd.NotFoundRetries
		d.FetchErrors += rd.FetchErrors
		d.DecodeErrors += rd.DecodeErrors
		d.SeqGaps += rd.SeqGaps
		d.Duplicates += rd.Duplicates
		d.DroppedBarrage += rd.DroppedBarrage
		d.JumpsToLive += rd.JumpsToLive
		d.MaxSegmentLagMs = max(d.MaxSegmentLagMs, rd.MaxSegmentLagMs)
		d.MaxClockMarginMs = max(d.MaxClockMarginMs, rd.MaxClockMarginMs)

		for i, s := range r.Timeline {
			if i == len(out.Timeline) {
				out.Timeline = append(out.Timeline, Second{T: s.T})
			}
			o := &out.Timeline[i]
			o.T = max(o.T, s.T)
			o.Due += s.Due
			o.Attempted += s.Attempted
			o.OK += s.OK
			o.Errors += s.Errors
			o.HeldBack += s.HeldBack
			o.NotOffered += s.NotOffered
			o.GiftsOK += s.GiftsOK
			// Per-second percentiles cannot be merged without their
			// histograms; the worst shard's is the honest bound.
			o.PostP50Ms = max(o.PostP50Ms, s.PostP50Ms)
			o.PostP99Ms = max(o.PostP99Ms, s.PostP99Ms)
		}
		for i, h := range hist(&r.Histograms) {
			hs[i].Add(*h)
		}
	}
	for i, h := range hist(&out.Histograms) {
		*h = hs[i].Data()
	}
	out.Latency = out.Histograms.latencies()

	s := schedule{pulse: ru.Pattern == PatternPulse, base: ru.RatePerSec, peak: ru.PulsePeakPerSec,
		ramp: time.Duration(ru.PulseRampSeconds * float64(time.Second)), hold: time.Duration(ru.PulseHoldSeconds * float64(time.Second))}
	if s.hold == 0 {
		s.hold = -1
	}
	ru.Schedule = s.String()
	load := max(ru.LoadSeconds, 1e-3)
	b := &out.Barrage
	b.AttemptedPerSec, b.OKPerSec = float64(b.Attempted)/load, float64(b.OK)/load
	for _, s := range out.Timeline {
		b.PeakPerSec = max(b.PeakPerSec, s.Attempted)
	}
	if b.Errors == nil {
		b.Errors = map[string]int64{}
	}
	out.Gifts.OKPerSec = float64(out.Gifts.Accepted+out.Gifts.DuplicateAfterRetry) / load
	if d := &out.Delivery; d.SegmentsFetched > 0 {
		d.FirstPollHitRatio = float64(d.FirstPollHits) / float64(d.SegmentsFetched)
	}
	dr := &out.Drops
	dr.Accepted = maps.Clone(dr.Accepted)
	dr.Rejected = slices.Clone(dr.Rejected)
	dr.BarrageUnaccounted = b.OK - dr.Accepted["barrage"] - dr.SilentDrops
	if out.Timeline == nil {
		out.Timeline = []Second{}
	}
	return out, nil
}

// addCounts adds b into a (allocating it when needed) and returns it.
func addCounts(a, b map[string]int64) map[string]int64 {
	if len(b) == 0 {
		return a
	}
	if a == nil {
		a = map[string]int64{}
	}
	for k, v := range b {
		a[k] += v
	}
	return a
}
