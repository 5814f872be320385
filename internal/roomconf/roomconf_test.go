package roomconf_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/roomconf"
)

// TestStores runs one conformance suite against every Store.
func TestStores(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) roomconf.Store{
		"memory": func(*testing.T) roomconf.Store { return roomconf.NewMemoryStore() },
		"redis":  func(t *testing.T) roomconf.Store { return roomconf.NewRedisStore(redistest.Client(t)) },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := open(t)
			if s, err := st.Get(ctx, "never-set"); err != nil || s != (roomconf.Settings{}) {
				t.Fatalf("Get of an unset room = %+v, %v", s, err)
			}
			if err := st.Put(ctx, "r1", roomconf.Settings{SegmentMs: 500}); err != nil {
				t.Fatal(err)
			}
			if s, err := st.Get(ctx, "r1"); err != nil || s.SegmentMs != 500 {
				t.Fatalf("Get = %+v, %v", s, err)
			}
			if err := st.Put(ctx, "r1", roomconf.Settings{SegmentMs: 300}); !errors.Is(err, roomconf.ErrInvalid) {
				t.Fatalf("Put of 300 ms: %v, want ErrInvalid", err)
			}
			if s, _ := st.Get(ctx, "r1"); s.SegmentMs != 500 {
				t.Fatalf("a refused Put changed the room: %+v", s)
			}
		})
	}
}

type failing struct{ roomconf.Store }

func (failing) Get(context.Context, string) (roomconf.Settings, error) {
	return roomconf.Settings{}, errors.New("down")
}

func TestCache(t *testing.T) {
	ctx := context.Background()
	mem := roomconf.NewMemoryStore()
	clk := clock.NewFake(time.Unix(1700000000, 0))
	c, err := roomconf.NewCache(mem, roomconf.Settings{}, time.Second, clk)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := c.Get(ctx, "r1"); err != nil || s.SegmentMs != 1000 {
		t.Fatalf("default = %+v, %v", s, err)
	}
	_ = mem.Put(ctx, "r1", roomconf.Settings{SegmentMs: 250})
	if s, _ := c.Get(ctx, "r1"); s.SegmentMs != 1000 {
		t.Fatalf("read again within the TTL: %+v", s)
	}
	clk.Advance(time.Second)
	if s, _ := c.Get(ctx, "r1"); s.SegmentMs != 250 {
		t.Fatalf("after the TTL: %+v", s)
	}

	// A failing store keeps the last good value; a room never read gets
	// the defaults and the error.
	fc, _ := roomconf.NewCache(failing{}, roomconf.Settings{SegmentMs: 500}, time.Second, clk)
	if s, err := fc.Get(ctx, "r2"); err == nil || s.SegmentMs != 500 {
		t.Fatalf("never read, store down: %+v, %v", s, err)
	}
	if _, err := roomconf.NewCache(mem, roomconf.Settings{SegmentMs: 7}, 0, nil); err == nil {
		t.Fatal("a 7 ms default accepted")
	}
}
