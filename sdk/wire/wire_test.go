package wire_test

import (
	"errors"
	"math"
	"reflect"
	"strconv"
	"testing"
	"unicode/utf8"

	"danmaku/sdk/wire"
)

func TestParseID(t *testing.T) {
	tests := []struct {
		in      string
		ms      int64
		seq     uint64
		wantErr bool
	}{
		{in: "0-0"},
		{in: "0-1", seq: 1},
		{in: "1700000000123-0", ms: 1700000000123},
		{in: "1700000000123-42", ms: 1700000000123, seq: 42},
		{in: strconv.FormatInt(math.MaxInt64, 10) + "-" + strconv.FormatUint(math.MaxUint64, 10), ms: math.MaxInt64, seq: math.MaxUint64},

		{in: "", wantErr: true},
		{in: "-", wantErr: true},
		{in: "0", wantErr: true},
		{in: "$", wantErr: true},
		{in: "1-", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "-1-0", wantErr: true},
		{in: "1--1", wantErr: true},
		{in: "1-2-3", wantErr: true},
		{in: "a-1", wantErr: true},
		{in: "1-a", wantErr: true},
		{in: " 1-2", wantErr: true},
		{in: "1-2 ", wantErr: true},
		{in: "1.5-2", wantErr: true},
		{in: "9223372036854775808-0", wantErr: true},  // ms overflows int64
		{in: "0-18446744073709551616", wantErr: true}, // seq overflows uint64
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			ms, seq, err := wire.ParseID(tt.in)
			if tt.wantErr {
				if !errors.Is(err, wire.ErrBadID) {
					t.Fatalf("ParseID(%q) err = %v, want ErrBadID", tt.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseID(%q): %v", tt.in, err)
			}
			if ms != tt.ms || seq != tt.seq {
				t.Fatalf("ParseID(%q) = %d, %d; want %d, %d", tt.in, ms, seq, tt.ms, tt.seq)
			}
			if got := wire.FormatID(ms, seq); got != tt.in {
				t.Fatalf("FormatID(%d, %d) = %q, want %q", ms, seq, got, tt.in)
			}
		})
	}
}

func TestFormatID(t *testing.T) {
	tests := []struct {
		ms   int64
		seq  uint64
		want string
	}{
		{0, 0, "0-0"},
		{1, 2, "1-2"},
		{1700000000999, 18, "1700000000999-18"},
	}
	for _, tt := range tests {
		if got := wire.FormatID(tt.ms, tt.seq); got != tt.want {
			t.Errorf("FormatID(%d, %d) = %q, want %q", tt.ms, tt.seq, got, tt.want)
		}
	}
}

func TestCompareIDs(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"1-0", "1-0", 0},
		{"1-0", "1-1", -1},
		{"1-1", "1-0", 1},
		{"1-9", "2-0", -1},
		{"9-0", "10-0", -1}, // numeric, not lexical
		{"1-9", "1-10", -1}, // numeric seq too
		{"x", "0-0", -1},    // malformed sorts first
		{"", "0-0", -1},     // malformed sorts first
		{"a", "b", -1},      // both malformed: byte order
		{"zz", "zz", 0},     // both malformed, equal
		{"1700000000123-0", "1700000000122-99", 1},
	}
	for _, tt := range tests {
		if got := wire.CompareIDs(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareIDs(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := wire.CompareIDs(tt.b, tt.a); got != -tt.want {
			t.Errorf("CompareIDs(%q, %q) = %d, want %d (antisymmetry)", tt.b, tt.a, got, -tt.want)
		}
	}
}

func TestIdentity(t *testing.T) {
	tests := []struct {
		m    wire.Message
		want string
	}{
		{wire.Message{ID: "5-0", Kind: wire.KindBarrage}, "b/5-0"},
		{wire.Message{ID: "5-0", Kind: wire.KindGift}, "l/5-0"},
		{wire.Message{ID: "5-0", Kind: wire.KindSystem}, "l/5-0"},
	}
	for _, tt := range tests {
		if got := tt.m.Identity(); got != tt.want {
			t.Errorf("%v %s Identity() = %q, want %q", tt.m.Kind, tt.m.ID, got, tt.want)
		}
		if got := wire.IdentityOf(tt.m.Kind, tt.m.ID); got != tt.want {
			t.Errorf("IdentityOf(%v, %s) = %q, want %q", tt.m.Kind, tt.m.ID, got, tt.want)
		}
	}
	// A barrage and a gift may share an id (separate lanes) but never an identity.
	b := wire.Message{ID: "5-0", Kind: wire.KindBarrage}
	g := wire.Message{ID: "5-0", Kind: wire.KindGift}
	if b.Identity() == g.Identity() {
		t.Fatal("barrage and gift with the same id share an identity")
	}
}

func TestSecondOf(t *testing.T) {
	tests := []struct {
		id      string
		want    int64
		wantErr bool
	}{
		{id: "0-0", want: 0},
		{id: "999-5", want: 0},
		{id: "1000-0", want: 1},
		{id: "1700000000999-3", want: 1700000000},
		{id: "bad", wantErr: true},
	}
	for _, tt := range tests {
		got, err := wire.SecondOf(tt.id)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("SecondOf(%q) = %d, %v; want %d, err=%v", tt.id, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestTruncateRunes(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"", 6, ""},
		{"abc", 6, "abc"},
		{"abcdef", 6, "abcdef"},
		{"abcdefg", 6, "abcdef"},
		{"abc", 0, ""},
		{"你好世界和平", 6, "你好世界和平"},
		{"你好世界和平万岁", 6, "你好世界和平"},
		{"ab你好cd世界", 6, "ab你好cd"},
		{"😀😃😄😁😆😅🤣", 6, "😀😃😄😁😆😅"},
		{"a\xffbc", 2, "a\xff"}, // an invalid byte counts as one rune
	}
	for _, tt := range tests {
		got := wire.TruncateRunes(tt.s, tt.n)
		if got != tt.want {
			t.Errorf("TruncateRunes(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
		if utf8.ValidString(tt.s) && !utf8.ValidString(got) {
			t.Errorf("TruncateRunes(%q, %d) = %q cut a rune in half", tt.s, tt.n, got)
		}
	}
}

func TestSlim(t *testing.T) {
	tests := []struct {
		name string
		in   wire.Message
		want wire.Message
	}{
		{
			name: "offset from id and nick cut",
			in:   wire.Message{ID: "1700000000123-4", Kind: wire.KindBarrage, User: "u1", Nick: "abcdefghij", Avatar: "a1", Text: "hi"},
			want: wire.Message{ID: "1700000000123-4", Kind: wire.KindBarrage, Offset: 123, User: "u1", Nick: "abcdef", Avatar: "a1", Text: "hi"},
		},
		{
			name: "multi-byte nick",
			in:   wire.Message{ID: "1700000000999-0", Kind: wire.KindBarrage, Nick: "超级无敌小可爱酱"},
			want: wire.Message{ID: "1700000000999-0", Kind: wire.KindBarrage, Offset: 999, Nick: "超级无敌小可"},
		},
		{
			name: "first millisecond of a second",
			in:   wire.Message{ID: "1700000001000-7", Kind: wire.KindSystem, Text: "开播啦", Role: "host"},
			want: wire.Message{ID: "1700000001000-7", Kind: wire.KindSystem, Offset: 0, Text: "开播啦", Role: "host"},
		},
		{
			name: "order cleared, gift fields kept",
			in: wire.Message{ID: "1700000000500-1", Kind: wire.KindGift, User: "u2", Nick: "短名", Gift: "rocket",
				Value: 50000, Count: 3, Merged: []string{"1700000000500-1", "1700000000600-0"}, Order: "ord-1"},
			want: wire.Message{ID: "1700000000500-1", Kind: wire.KindGift, Offset: 500, User: "u2", Nick: "短名", Gift: "rocket",
				Value: 50000, Count: 3, Merged: []string{"1700000000500-1", "1700000000600-0"}},
		},
		{
			name: "malformed id keeps offset",
			in:   wire.Message{ID: "nope", Kind: wire.KindBarrage, Offset: 5},
			want: wire.Message{ID: "nope", Kind: wire.KindBarrage, Offset: 5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := wire.Slim(tt.in)
			if !messagesEqual(got, tt.want) {
				t.Fatalf("Slim() = %+v\nwant    %+v", got, tt.want)
			}
		})
	}
}

func TestKind(t *testing.T) {
	tests := []struct {
		k     wire.Kind
		valid bool
		str   string
	}{
		{0, false, "kind(0)"},
		{wire.KindBarrage, true, "barrage"},
		{wire.KindGift, true, "gift"},
		{wire.KindSystem, true, "system"},
		{4, false, "kind(4)"},
	}
	for _, tt := range tests {
		if tt.k.Valid() != tt.valid || tt.k.String() != tt.str {
			t.Errorf("Kind(%d): Valid=%v String=%q; want %v %q", uint8(tt.k), tt.k.Valid(), tt.k.String(), tt.valid, tt.str)
		}
	}
}

func TestValidRoomAndKeys(t *testing.T) {
	for _, r := range []string{"a", "room_1", "A-b_9", "x"} {
		if !wire.ValidRoom(r) {
			t.Errorf("ValidRoom(%q) = false", r)
		}
	}
	long := ""
	for range 65 {
		long += "r"
	}
	for _, r := range []string{"", "a/b", "a b", "..", "房间", "a.b", long, "a\n"} {
		if wire.ValidRoom(r) {
			t.Errorf("ValidRoom(%q) = true", r)
		}
	}
	if got := wire.SegmentKey("r1", 1700000000); got != "rooms/r1/s/1700000000.msgpack" {
		t.Errorf("SegmentKey = %q", got)
	}
	if got := wire.ManifestKey("r1"); got != "rooms/r1/live.json" {
		t.Errorf("ManifestKey = %q", got)
	}
}

// messagesEqual compares messages treating a nil and an empty Merged alike
// (omitempty drops an empty list on the wire).
func messagesEqual(a, b wire.Message) bool {
	if len(a.Merged) == 0 {
		a.Merged = nil
	}
	if len(b.Merged) == 0 {
		b.Merged = nil
	}
	return reflect.DeepEqual(a, b)
}

// TestSiteIdentity: a site-wide broadcast's identity is of a lane of its
// own — its id is the site stream's and may equal a room message's — and
// the flag survives a segment.
func TestSiteIdentity(t *testing.T) {
	room := wire.Message{ID: "1700000000000-0", Kind: wire.KindSystem, Text: "room"}
	site := wire.Message{ID: "1700000000000-0", Kind: wire.KindSystem, Text: "site", Site: true}
	if room.Identity() == site.Identity() {
		t.Fatalf("room and site messages with one id share the identity %q", room.Identity())
	}
	b, err := wire.EncodeSegment(&wire.Segment{V: 1, Room: "r1", Second: 1_700_000_000, Dur: 1000, Messages: []wire.Message{wire.Slim(site)}})
	if err != nil {
		t.Fatal(err)
	}
	seg, err := wire.DecodeSegment(b)
	if err != nil || len(seg.Messages) != 1 || !seg.Messages[0].Site || seg.Messages[0].Identity() != site.Identity() {
		t.Fatalf("decoded %+v, %v", seg, err)
	}
}
