package slicer

// A room's takedowns as its leader keeps them: learnt from the live lane's
// takedown entries as they are read (wire.Message.TakenDown), named in the
// segment of the slot each entry falls in (slotPlan.TakenDown), used to
// leave taken-down messages out of every segment not yet written
// (slotInput.TakenDown), and published as the room's list
// (wire.TakedownListKey) before the manifest that counts them.

import (
	"context"
	"errors"
	"fmt"

	"danmaku/internal/objstore"
	"danmaku/sdk/wire"
)

// maxTakedowns bounds a room's list: the ingest's bound per room
// (ingest.MaxTakedownsPerRoom); entries beyond it still go into their
// segment's td, not into the list.
const maxTakedowns = 10_000

// takedowns is a room's list as this leader knows it. Only the room's
// goroutine touches it.
type takedowns struct {
	list []wire.TakenDown // oldest first
	set  map[string]bool  // identities of list
	// published is how many of list the list object holds (as written or
	// read by this leader), etag its ETag ("" none known).
	published int
	etag      string
}

// note adds ts to the list (those it does not hold, while it has room) and
// returns how many it added.
func (t *takedowns) note(ts []wire.TakenDown) (added int) {
	for _, x := range ts {
		k := x.Identity()
		if t.set[k] || len(t.list) >= maxTakedowns || !wire.ValidTakenDown(x) {
			continue
		}
		if t.set == nil {
			t.set = map[string]bool{}
		}
		t.set[k] = true
		t.list = append(t.list, x)
		added++
	}
	return added
}

// loadTakedowns reads the room's published list at the start of a term, so
// that a new leader leaves out what its predecessors knew was taken down
// and grows the list rather than replacing it. No list: none yet. A list
// that does not decode is logged and replaced by what this leader learns.
func (s *Slicer) loadTakedowns(ctx context.Context, st *roomState) error {
	obj, err := s.cfg.Objects.Get(ctx, wire.TakedownListKey(st.room))
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("slicer: read takedown list: %w", err)
	}
	st.td.etag = obj.ETag
	l, err := wire.DecodeTakedownList(obj.Body)
	if err != nil || l.Room != st.room {
		s.cfg.Logger.Warn("slicer: takedown list does not decode; rewriting it from what this leader reads", "room", st.room, "err", err)
		return nil
	}
	st.td.note(l.IDs)
	st.td.published = len(st.td.list)
	return nil
}

// publishTakedowns writes the room's list when it holds more than the list
// object, before the manifest that counts it (publishManifest). A list
// written meanwhile by another leader (a deposed one, or a successor) is
// read and merged, never overwritten: the list only grows. A failure keeps
// the manifest's count where it was; the next slot tries again.
func (s *Slicer) publishTakedowns(ctx context.Context, st *roomState) {
	for attempt := 0; attempt < 3 && len(st.td.list) > st.td.published; attempt++ {
		body, err := wire.EncodeTakedownList(&wire.TakedownList{V: wire.Version, Room: st.room, N: uint64(len(st.td.list)), IDs: st.td.list})
		if err != nil {
			s.cfg.Logger.Error("slicer: encode takedown list", "room", st.room, "err", err)
			return
		}
		opts := objstore.PutOptions{ContentType: wire.TakedownListContentType, CacheControl: wire.TakedownListCacheControl}
		if st.td.etag == "" {
			opts.IfNoneMatch = true
		} else {
			opts.IfMatch = st.td.etag
		}
		etag, err := s.cfg.Objects.Put(ctx, wire.TakedownListKey(st.room), body, opts)
		if err == nil {
			st.td.etag, st.td.published = etag, len(st.td.list)
			return
		}
		if !errors.Is(err, objstore.ErrPrecondition) {
			s.cfg.Logger.Warn("slicer: takedown list write failed; retried after the next slot", "room", st.room, "err", err)
			return
		}
		// Another writer moved it: take in what it holds, then write the
		// union over its version.
		obj, gerr := s.cfg.Objects.Get(ctx, wire.TakedownListKey(st.room))
		switch {
		case errors.Is(gerr, objstore.ErrNotFound):
			st.td.etag = ""
		case gerr != nil:
			s.cfg.Logger.Warn("slicer: takedown list read failed", "room", st.room, "err", gerr)
			return
		default:
			st.td.etag = obj.ETag
			if l, derr := wire.DecodeTakedownList(obj.Body); derr == nil {
				theirs := &takedowns{}
				theirs.note(l.IDs)
				theirs.note(st.td.list)
				st.td.list, st.td.set = theirs.list, theirs.set
			}
		}
	}
}
