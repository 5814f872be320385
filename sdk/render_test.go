package sdk_test

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"danmaku/sdk"
)

const testDisplay = 8 * time.Second // the default

func newTestQueue(t testing.TB, cfg sdk.RenderConfig) (*sdk.RenderQueue, *sdk.FakeClock) {
	t.Helper()
	clk := sdk.NewFakeClock(time.Unix(1_700_000_000, 0))
	cfg.Clock = clk
	q, err := sdk.NewRenderQueue(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q, clk
}

// msg makes a message from a name: its first letter is the kind (b barrage,
// g gift, s system, anything else an unknown kind), the name its id.
func msg(name string) sdk.Message {
	kind := sdk.Kind(9)
	switch name[0] {
	case 'b':
		kind = sdk.KindBarrage
	case 'g':
		kind = sdk.KindGift
	case 's':
		kind = sdk.KindSystem
	}
	return sdk.Message{ID: name, Kind: kind, Text: "text of " + name}
}

func names(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, prefix+strconv.Itoa(i))
	}
	return out
}

// drain pulls everything the queue hands out now.
func drain(q *sdk.RenderQueue) []string {
	var out []string
	for m, ok := q.Next(); ok; m, ok = q.Next() {
		out = append(out, m.ID)
	}
	return out
}

// drainAll pulls until the queue is empty, moving the clock on whenever
// every slot is taken.
func drainAll(t *testing.T, q *sdk.RenderQueue, clk *sdk.FakeClock) []string {
	t.Helper()
	var out []string
	for q.Len() > 0 {
		got := drain(q)
		if len(got) == 0 && q.Len() > 0 && q.OnScreen() == 0 {
			t.Fatalf("nothing handed out with %d waiting and a free screen", q.Len())
		}
		out = append(out, got...)
		clk.Advance(testDisplay)
	}
	return out
}

func TestRenderQueueConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  sdk.RenderConfig
		ok   bool
	}{
		{"defaults", sdk.RenderConfig{}, true},
		{"set", sdk.RenderConfig{Visible: 1, Buffer: 1, Display: time.Second}, true},
		{"negative visible", sdk.RenderConfig{Visible: -1}, false},
		{"negative buffer", sdk.RenderConfig{Buffer: -1}, false},
		{"negative display", sdk.RenderConfig{Display: -time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := sdk.NewRenderQueue(tc.cfg)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok = %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, sdk.ErrConfig) {
				t.Fatalf("err = %v, not ErrConfig", err)
			}
			if err == nil && q == nil {
				t.Fatal("nil queue")
			}
		})
	}
}

func TestRenderQueueVisibleMax(t *testing.T) {
	q, clk := newTestQueue(t, sdk.RenderConfig{})
	for _, n := range names("b", 0, 40) {
		q.Push(msg(n))
	}
	if got, want := drain(q), names("b", 0, 32); !slices.Equal(got, want) {
		t.Fatalf("first pull = %v, want %v", got, want)
	}
	if q.OnScreen() != 32 || q.Len() != 8 {
		t.Fatalf("on screen %d, waiting %d; want 32, 8", q.OnScreen(), q.Len())
	}
	// The slots are held for the whole display time, and no longer.
	clk.Advance(testDisplay - time.Nanosecond)
	if got := drain(q); len(got) != 0 {
		t.Fatalf("handed out %v before a slot freed", got)
	}
	clk.Advance(time.Nanosecond)
	if got, want := drain(q), names("b", 32, 40); !slices.Equal(got, want) {
		t.Fatalf("second pull = %v, want %v", got, want)
	}
	if q.OnScreen() != 8 || q.Len() != 0 {
		t.Fatalf("on screen %d, waiting %d; want 8, 0", q.OnScreen(), q.Len())
	}
	// Slots free in the order they were taken: one more shown later
	// outlasts the eight.
	clk.Advance(testDisplay / 2)
	q.Push(msg("b40"))
	drain(q)
	clk.Advance(testDisplay / 2)
	if q.OnScreen() != 1 {
		t.Fatalf("on screen %d, want 1", q.OnScreen())
	}
	if s := q.Stats(); s.Pushed != 41 || s.Shown != 41 || s.Drops() != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRenderQueueOverflow(t *testing.T) {
	q, _ := newTestQueue(t, sdk.RenderConfig{})
	for _, n := range names("b", 0, 121) {
		q.Push(msg(n))
	}
	if q.Len() != 120 {
		t.Fatalf("waiting %d, want 120", q.Len())
	}
	want := sdk.RenderStats{Pushed: 121, DroppedOverflow: 1}
	if s := q.Stats(); s != want {
		t.Fatalf("stats %+v, want %+v", s, want)
	}
	if q.Drops() != 1 {
		t.Fatalf("Drops = %d, want 1", q.Drops())
	}
	// The oldest went: the screen starts at the second.
	if got, want := drain(q), names("b", 1, 33); !slices.Equal(got, want) {
		t.Fatalf("pull = %v, want %v", got, want)
	}
}

func TestRenderQueueKinds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		buffer int
		push   []string
		want   []string // everything shown, in order
		stats  sdk.RenderStats
	}{
		{
			name:   "gifts and system messages first, each kind in order",
			buffer: 10,
			push:   []string{"b0", "g0", "b1", "s0", "b2", "g1"},
			want:   []string{"g0", "s0", "g1", "b0", "b1", "b2"},
		},
		{
			name:   "full buffer drops the oldest barrage for a gift",
			buffer: 4,
			push:   []string{"b0", "g0", "b1", "g1", "b2", "g2", "s0"},
			want:   []string{"g0", "g1", "g2", "s0"},
			stats:  sdk.RenderStats{DroppedOverflow: 3},
		},
		{
			name:   "buffer of gifts grows; barrage into it is dropped",
			buffer: 3,
			push:   []string{"g0", "g1", "b0", "s0", "g2", "b1", "g3"},
			want:   []string{"g0", "g1", "s0", "g2", "g3"},
			stats:  sdk.RenderStats{DroppedOverflow: 2, BeyondBuffer: 2},
		},
		{
			name:   "unknown kinds are barrage",
			buffer: 2,
			push:   []string{"x0", "g0", "x1", "g1"},
			want:   []string{"g0", "g1"},
			stats:  sdk.RenderStats{DroppedOverflow: 2},
		},
		{
			name:   "default buffer: 120 barrage then 130 gifts",
			buffer: 0,
			push:   append(names("b", 0, 120), names("g", 0, 130)...),
			want:   names("g", 0, 130),
			stats:  sdk.RenderStats{DroppedOverflow: 120, BeyondBuffer: 10},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, clk := newTestQueue(t, sdk.RenderConfig{Buffer: tc.buffer, Visible: 2})
			for _, n := range tc.push {
				q.Push(msg(n))
			}
			got := drainAll(t, q, clk)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("shown %v, want %v", got, tc.want)
			}
			want := tc.stats
			want.Pushed, want.Shown = int64(len(tc.push)), int64(len(tc.want))
			if s := q.Stats(); s != want {
				t.Fatalf("stats %+v, want %+v", s, want)
			}
		})
	}
}

func TestRenderQueueOrder(t *testing.T) {
	// Pushes and pulls interleave at random-looking points; barrage never
	// overflows here, so everything comes out in push order.
	q, clk := newTestQueue(t, sdk.RenderConfig{Visible: 3, Buffer: 1000})
	var pushed, shown []string
	for i := range 500 {
		n := "b" + strconv.Itoa(i)
		q.Push(msg(n))
		pushed = append(pushed, n)
		if i%7 == 0 {
			shown = append(shown, drain(q)...)
		}
		if i%11 == 0 {
			clk.Advance(testDisplay)
		}
	}
	shown = append(shown, drainAll(t, q, clk)...)
	if !slices.Equal(shown, pushed) {
		t.Fatalf("shown out of order:\n%v\nwant\n%v", shown, pushed)
	}
}

func TestRenderQueueHidden(t *testing.T) {
	q, clk := newTestQueue(t, sdk.RenderConfig{})
	for _, n := range names("b", 0, 40) {
		q.Push(msg(n))
	}
	drain(q) // b0..b31 on screen, b32..b39 waiting

	q.SetHidden(true)
	if !q.Hidden() || q.OnScreen() != 0 || q.NewCount() != 0 {
		t.Fatalf("hidden %v, on screen %d, new %d; want true, 0, 0", q.Hidden(), q.OnScreen(), q.NewCount())
	}
	// 200 barrage with a gift and an announcement among them arrive.
	arrivals := names("b", 40, 240)
	arrivals = slices.Insert(arrivals, 50, "g0")
	arrivals = slices.Insert(arrivals, 150, "s0")
	for i, n := range arrivals {
		q.Push(msg(n))
		if i%20 == 0 {
			clk.Advance(time.Minute) // time passes; nothing is shown
			if got := drain(q); len(got) != 0 {
				t.Fatalf("shown %v while hidden", got)
			}
		}
	}
	if q.NewCount() != 202 {
		t.Fatalf("NewCount = %d, want 202", q.NewCount())
	}
	// 8 + 202 arrived for 120 places: the 90 oldest barrage went.
	want := sdk.RenderStats{Pushed: 242, Shown: 32, DroppedHidden: 90}
	if s := q.Stats(); s != want {
		t.Fatalf("stats %+v, want %+v", s, want)
	}
	q.SetHidden(true) // no-op
	if q.NewCount() != 202 {
		t.Fatalf("hiding again reset NewCount to %d", q.NewCount())
	}

	q.SetHidden(false)
	if q.Hidden() || q.NewCount() != 0 {
		t.Fatalf("shown again: hidden %v, NewCount %d", q.Hidden(), q.NewCount())
	}
	// A free screen: the gift and the announcement, then the oldest barrage
	// the buffer kept, in order.
	wantShown := append([]string{"g0", "s0"}, names("b", 122, 152)...)
	if got := drain(q); !slices.Equal(got, wantShown) {
		t.Fatalf("after showing: %v, want %v", got, wantShown)
	}
	if got, want := drainAll(t, q, clk), names("b", 152, 240); !slices.Equal(got, want) {
		t.Fatalf("rest: %v, want %v", got, want)
	}

	// Each hidden period counts from zero.
	q.SetHidden(true)
	q.Push(msg("b240"))
	if q.NewCount() != 1 {
		t.Fatalf("NewCount = %d, want 1", q.NewCount())
	}
	q.SetHidden(false)
	q.Push(msg("b241"))
	if q.NewCount() != 0 {
		t.Fatalf("NewCount = %d while shown", q.NewCount())
	}
	if s := q.Stats(); s.DroppedOverflow != 0 || s.Drops() != 90 {
		t.Fatalf("stats %+v", s)
	}
}

// TestRenderQueueConcurrent pushes from one goroutine while another pulls,
// as the SDK's goroutine and the UI thread do; run it with -race.
func TestRenderQueueConcurrent(t *testing.T) {
	q, clk := newTestQueue(t, sdk.RenderConfig{Visible: 4, Buffer: 16})
	const n = 5000
	var (
		wg   sync.WaitGroup
		done = make(chan struct{})
		gift int
	)
	wg.Go(func() {
		defer close(done)
		for i := range n {
			if i%10 == 0 {
				q.Push(msg("g" + strconv.Itoa(i)))
				gift++
			} else {
				q.Push(msg("b" + strconv.Itoa(i)))
			}
			if i%100 == 0 {
				q.SetHidden(i%200 == 0)
				runtime.Gosched()
			}
		}
		q.SetHidden(false)
	})
	var (
		shown      []string
		giftsShown int64 // counts: gifts pushed while hidden may collapse
	)
	wg.Go(func() {
		for {
			if m, ok := q.Next(); ok {
				shown = append(shown, m.ID)
				if m.Kind == sdk.KindGift {
					giftsShown += int64(max(m.Count, 1))
				}
				continue
			}
			select {
			case <-done:
				if q.Len() == 0 {
					return
				}
			default:
			}
			clk.Advance(testDisplay / 4)
			runtime.Gosched()
		}
	})
	wg.Wait()

	last := map[byte]int{'b': -1, 'g': -1}
	for _, id := range shown {
		i, _ := strconv.Atoi(id[1:])
		if i <= last[id[0]] {
			t.Fatalf("%s shown after %c%d", id, id[0], last[id[0]])
		}
		last[id[0]] = i
	}
	if giftsShown != int64(gift) {
		t.Fatalf("%d gifts shown, %d pushed", giftsShown, gift)
	}
	s := q.Stats()
	if s.Pushed != n || s.Shown != int64(len(shown)) || s.Shown+s.Drops()+s.CollapsedGifts != n {
		t.Fatalf("stats %+v for %d pushed, %d shown", s, n, len(shown))
	}
}

func TestRenderQueueAllocs(t *testing.T) {
	for _, name := range []string{"b0", "g0"} {
		t.Run(name, func(t *testing.T) {
			q, clk := newTestQueue(t, sdk.RenderConfig{})
			m := msg(name)
			for range 200 { // a full buffer: every Push drops one
				q.Push(msg("b"))
			}
			allocs := testing.AllocsPerRun(1000, func() {
				q.Push(m)
				if _, ok := q.Next(); !ok {
					t.Fatal("nothing to show")
				}
				clk.Advance(testDisplay)
			})
			if allocs != 0 {
				t.Fatalf("%v allocations per Push and Next, want 0", allocs)
			}
		})
	}
}

func BenchmarkRenderQueue(b *testing.B) {
	q, clk := newTestQueue(b, sdk.RenderConfig{})
	m := msg("b0")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		q.Push(m)
		q.Next()
		if i%32 == 31 {
			clk.Advance(testDisplay)
		}
	}
}

func ExampleRenderQueue() {
	q, err := sdk.NewRenderQueue(sdk.RenderConfig{}) // 32 slots of 8 s, 120 waiting
	if err != nil {
		panic(err)
	}
	// In the app: go func() { for m := range c.Messages() { q.Push(m) } }()
	q.Push(sdk.Message{ID: "1-0", Kind: sdk.KindBarrage, Nick: "ann", Text: "hello"})
	q.Push(sdk.Message{ID: "1-1", Kind: sdk.KindGift, Nick: "bob", Gift: "rose", Count: 3})

	// On every frame of the UI:
	for m, ok := q.Next(); ok; m, ok = q.Next() {
		fmt.Println(m.Kind, m.Nick)
	}

	q.SetHidden(true) // the app went to the background
	q.Push(sdk.Message{ID: "1-2", Kind: sdk.KindBarrage, Nick: "cy", Text: "encore!"})
	fmt.Println(q.NewCount(), "new")
	// Output:
	// gift bob
	// barrage ann
	// 1 new
}

// TestRenderQueueHiddenGiftsBounded: gifts arriving while hidden never grow
// the queue past the buffer plus one entry per gift in the catalogue, and
// the total of gift counts handed out after showing again is exactly the
// total received.
func TestRenderQueueHiddenGiftsBounded(t *testing.T) {
	q, clk := newTestQueue(t, sdk.RenderConfig{Buffer: 20})
	q.SetHidden(true)
	gifts := []string{"rose", "rocket", "car"}
	var sent int64
	for i := range 2000 {
		m := sdk.Message{ID: "g" + strconv.Itoa(i), Kind: sdk.KindGift, User: "u" + strconv.Itoa(i%50),
			Gift: gifts[i%3], Value: int64(10 * (i%3 + 1)), Count: uint32(i % 4), Merged: []string{"x"}}
		sent += int64(max(m.Count, 1))
		q.Push(m)
		q.Push(msg("b" + strconv.Itoa(i))) // barrage keeps coming and is dropped first
		if n := q.Len(); n > 20+len(gifts) {
			t.Fatalf("after %d gifts %d wait: gifts are unbounded while hidden", i+1, n)
		}
	}
	if st := q.Stats(); st.CollapsedGifts == 0 || q.NewCount() != 4000 {
		t.Fatalf("stats %+v, NewCount %d", st, q.NewCount())
	}
	q.SetHidden(false)
	var shown int64
	for q.Len() > 0 {
		for m, ok := q.Next(); ok; m, ok = q.Next() {
			if m.Kind == sdk.KindGift {
				shown += int64(max(m.Count, 1))
			}
		}
		clk.Advance(testDisplay)
	}
	if shown != sent {
		t.Fatalf("gift total shown %d, received %d", shown, sent)
	}
}
