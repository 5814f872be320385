package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"danmaku/internal/objstore"
	"danmaku/sdk/wire"
)

// ReadStore is what reading the trail needs: keys listed by prefix, then
// each object read.
type ReadStore interface {
	objstore.Store
	objstore.Lister
}

// Query selects records.
type Query struct {
	// Room is required.
	Room string
	// Since and Until bound the records' times: Since <= At < Until. A
	// zero Until is open.
	Since, Until time.Time
	// User, when set, keeps only that user's records.
	User string
}

// maxObjectsPerMinute bounds how many objects of one minute a read holds:
// a room's minute is one object per node, plus early parts.
const maxObjectsPerMinute = 10_000

// Read calls fn with every record q selects, in time order, and gap with
// the header of every object that reports lost records (the trail has a
// hole just before it). Objects are read a minute at a time: a record
// recorded just after its minute ended sits in the next minute's objects,
// so records are held back one minute to be sorted among those. An object
// that does not decode is an error naming its key (the trail must not be
// read as complete when it is not).
func Read(ctx context.Context, s ReadStore, q Query, fn func(Record) error, gap func(key string, h Header) error) error {
	if !wire.ValidRoom(q.Room) {
		return fmt.Errorf("audit: room %q: 1-64 of A-Z a-z 0-9 _ -", q.Room)
	}
	if !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return errors.New("audit: Since must be before Until")
	}
	// A batch holds records of its own minute and, recorded late, of the
	// minutes before: a record of Since's minute or later is in an object
	// of that minute or later, and one of Until's minute may be in the
	// next minute's objects. (A minute's keys sort after its bare name.)
	start := RoomPrefix(q.Room) + MinuteName(q.Since)
	var stop time.Time
	if !q.Until.IsZero() {
		stop = q.Until.UTC().Truncate(time.Minute).Add(time.Minute)
	}
	var pending []Record
	flush := func(before time.Time, all bool) error {
		slices.SortStableFunc(pending, func(a, b Record) int { return a.At.Compare(b.At) })
		i := 0
		for ; i < len(pending) && (all || pending[i].At.Before(before)); i++ {
			if err := fn(pending[i]); err != nil {
				return err
			}
		}
		pending = slices.Delete(pending, 0, i)
		return nil
	}
	var group []string
	var groupMin time.Time
	readGroup := func() error {
		for _, key := range group {
			obj, err := s.Get(ctx, key)
			if errors.Is(err, objstore.ErrNotFound) {
				continue // swept meanwhile
			}
			if err != nil {
				return fmt.Errorf("audit: read %s: %w", key, err)
			}
			h, recs, err := Decode(obj.Body)
			if err != nil {
				return fmt.Errorf("audit: %s: %w", key, err)
			}
			if h.Lost > 0 && gap != nil {
				if err := gap(key, h); err != nil {
					return err
				}
			}
			for _, r := range recs {
				if r.At.Before(q.Since) || !q.Until.IsZero() && !r.At.Before(q.Until) || q.User != "" && r.User != q.User {
					continue
				}
				pending = append(pending, r)
			}
		}
		group = group[:0]
		return flush(groupMin, false)
	}
	var inner error
	err := s.List(ctx, RoomPrefix(q.Room), start, func(key string) bool {
		_, m, ok := KeyMinute(key)
		if !ok {
			return true
		}
		if !stop.IsZero() && m.After(stop) {
			return false
		}
		if !m.Equal(groupMin) && len(group) > 0 {
			if inner = readGroup(); inner != nil {
				return false
			}
		}
		if len(group) >= maxObjectsPerMinute {
			inner = fmt.Errorf("audit: more than %d objects in minute %s of room %s", maxObjectsPerMinute, MinuteName(m), q.Room)
			return false
		}
		groupMin = m
		group = append(group, key)
		return true
	})
	if inner != nil {
		return inner
	}
	if err != nil {
		return fmt.Errorf("audit: list %s: %w", q.Room, err)
	}
	if len(group) > 0 {
		if err := readGroup(); err != nil {
			return err
		}
	}
	return flush(time.Time{}, true)
}
