package sdk_test

import (
	"testing"

	"danmaku/sdk"
)

func notice(m sdk.Message) sdk.Message {
	return sdk.Message{ID: m.ID, Kind: sdk.KindTakedown, Value: int64(m.Kind)}
}

// A takedown removes a waiting message before the UI sees it, and one on
// screen is freed and handed back through Next as the notice, so that an app
// drawing only from Next removes the element.
func TestRenderQueueTakedown(t *testing.T) {
	q, clk := newTestQueue(t, sdk.RenderConfig{Visible: 1})
	b1, b2, b3, g1 := msg("b1"), msg("b2"), msg("b3"), msg("g1")
	for _, m := range []sdk.Message{b1, b2, b3, g1} {
		q.Push(m)
	}
	if m, ok := q.Next(); !ok || m.ID != g1.ID {
		t.Fatalf("Next = %v %v, want g1 first", m.ID, ok)
	}
	if _, ok := q.Next(); ok {
		t.Fatal("Next handed out a second message with one slot")
	}
	// The gift on screen; b1..b3 wait. A barrage takedown of the gift's id
	// names another lane and must not touch it.
	q.Push(sdk.Message{ID: g1.ID, Kind: sdk.KindTakedown, Value: int64(sdk.KindBarrage)})
	q.Push(notice(b2))
	if got := q.Len(); got != 2 {
		t.Fatalf("Len = %d after a waiting takedown, want 2", got)
	}
	if _, ok := q.Next(); ok {
		t.Fatal("the slot was freed by another lane's takedown")
	}
	q.Push(notice(g1))
	m, ok := q.Next()
	if td, isTD := sdk.TakedownOf(m); !ok || !isTD || td.ID != g1.ID || td.Kind != sdk.KindGift {
		t.Fatalf("Next after a shown takedown = %+v %v, want g1's notice", m, ok)
	}
	if m, ok := q.Next(); !ok || m.ID != b1.ID {
		t.Fatalf("Next = %v %v, want b1 in the freed slot", m.ID, ok)
	}
	if waiting, shown := q.Remove(b1.ID, sdk.KindBarrage); waiting || !shown {
		t.Errorf("Remove(b1) = waiting %v shown %v, want shown", waiting, shown)
	}
	if waiting, shown := q.Remove(b3.ID, sdk.KindBarrage); !waiting || shown {
		t.Errorf("Remove(b3) = waiting %v shown %v, want waiting", waiting, shown)
	}
	// A message whose display time passed is no longer on screen.
	q.Push(b2)
	if m, _ := q.Next(); m.ID != b2.ID {
		t.Fatalf("Next = %v, want b2", m.ID)
	}
	clk.Advance(testDisplay)
	q.Push(notice(b2))
	if m, ok := q.Next(); ok {
		t.Errorf("Next = %+v for a takedown of an expired message", m)
	}
	st := q.Stats()
	if st.RemovedWaiting != 2 || st.RemovedShown != 2 || st.Pushed != 5 || st.Shown != 3 {
		t.Errorf("stats = %+v, want 2 removed waiting, 2 shown, 5 pushed, 3 shown", st)
	}
}

// Hiding empties the screen: a notice not yet handed out is dropped with it.
func TestRenderQueueTakedownHidden(t *testing.T) {
	q, _ := newTestQueue(t, sdk.RenderConfig{})
	b1 := msg("b1")
	q.Push(b1)
	q.Next()
	q.Push(notice(b1))
	q.SetHidden(true)
	q.SetHidden(false)
	if m, ok := q.Next(); ok {
		t.Errorf("Next = %+v after hiding, want nothing", m)
	}
}
