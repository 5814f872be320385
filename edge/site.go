package edge

import (
	"time"

	"danmaku/internal/backoff"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// Site-wide broadcasts reach this edge's viewers through a path of their
// own, beside the rooms': one reader of the site stream per edge (siteLoop,
// started with the first room), which encodes each window's broadcasts
// once per hub and offers the frame to every connection whose socket holds
// fewer than siteQueueSize unwritten frames (room frames may fill it to
// QueueSize). A storm of broadcasts, coalesced to a frame per window,
// therefore never fills a socket into a 4001 close, and a room's gifts
// never wait behind more than a few site frames. The edge is the fast path:
// every live room's segments carry every broadcast once (the slicer), so a
// skipped frame is counted and its client gets the broadcast from the
// segments. Site messages are not in the rooms' rings: a resume never
// replays them, and clients keep their ids out of `last` (another id
// space).

// siteQueueSize is how many unwritten frames a socket may hold for a site
// frame still to be offered: a storm is coalesced into one frame per merge
// window, so a few frames are a second or so of it.
const siteQueueSize = 4

// startSite starts the site reader once, with the first hub.
func (s *Server) startSite() {
	s.siteOnce.Do(func() {
		s.wg.Add(1)
		go s.siteLoop()
	})
}

// siteLoop tails the site stream from its end (broadcasts before this edge
// started are in the segments) until the server stops, at most one batch
// per merge window.
func (s *Server) siteLoop() {
	defer s.wg.Done()
	ctx := s.ctx
	retry := backoff.New(50*time.Millisecond, maxBackoff) // jittered: every edge's reader fails at once
	var after string
	for after == "" {
		last, err := s.cfg.Store.LastID(ctx, stream.SiteKey)
		if err == nil {
			after = last
			break
		}
		s.m.readErrors.Inc()
		if !backoff.Sleep(ctx, retry.Next()) {
			return
		}
	}
	retry.Reset()
	var lastSent time.Time
	for {
		es, err := s.cfg.Store.Read(ctx, stream.SiteKey, after, readCount, s.cfg.ReadBlock)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.m.readErrors.Inc()
			if !backoff.Sleep(ctx, retry.Next()) {
				return
			}
			continue
		}
		retry.Reset()
		if len(es) == 0 {
			continue
		}
		after = es[len(es)-1].ID
		if wait := s.cfg.MergeWindow - time.Since(lastSent); wait > 0 && !backoff.Sleep(ctx, wait) {
			return
		}
		// What arrived while waiting shares the frame.
		if more, err := s.cfg.Store.Read(ctx, stream.SiteKey, after, readCount, 0); err == nil && len(more) > 0 {
			es = append(es, more...)
			after = more[len(more)-1].ID
		}
		s.fanSite(es)
		lastSent = time.Now()
	}
}

// fanSite offers es to every connection of every hub, encoded once per hub.
func (s *Server) fanSite(es []stream.Entry) {
	msgs := make([]wire.Message, 0, len(es))
	for i := range es {
		if es[i].Site && es[i].Kind == wire.KindSystem {
			msgs = append(msgs, wire.Slim(es[i]))
		}
	}
	if len(msgs) == 0 {
		return
	}
	hubs := s.hubList()
	for _, h := range hubs {
		frames, err := encodeFrames(h.room, msgs)
		if err != nil {
			s.log.Error("edge: encode site frame", "room", h.room, "err", err)
			continue
		}
		h.mu.Lock()
		conns := s.fanBuf.get(h.conns)
		h.mu.Unlock()
		s.fanOut(conns, func(c *conn, t *tally) {
			for _, f := range frames {
				c.offerSite(f, t)
			}
		})
		s.fanBuf.put(conns)
	}
}
