package audit_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"danmaku/internal/audit"
)

var t0 = time.Date(2026, 12, 1, 11, 7, 0, 0, time.UTC)

func rec(at time.Time, room, user, text string, d audit.Decision, reason string) audit.Record {
	return audit.Record{At: at, Room: room, User: user, Text: text, Decision: d, Reason: reason}
}

// TestEncodeDecode: every record comes back as written, whatever its text
// holds; invalid UTF-8 comes back as U+FFFD, as from any JSON encoder.
func TestEncodeDecode(t *testing.T) {
	in := []audit.Record{
		rec(t0, "r", "u1", "hello", audit.Stored, ""),
		rec(t0.Add(time.Millisecond), "r", "u2", `quo"te \ back\slash`, audit.Dropped, "duplicate"),
		rec(t0.Add(2*time.Millisecond), "r", "u3", "ctl\x00\x01\x1f\ttab\nnl", audit.Rejected, "sensitive_word"),
		rec(t0.Add(3*time.Millisecond), "r", "u4", "弹幕 ❤️ \u2028\u2029 e\u0301", audit.Sampled, "sampled"),
		{At: t0.Add(4 * time.Millisecond), Room: "r", User: "u/5", Text: "bad word", Shown: "*** word", Decision: audit.Masked, Reason: "sensitive_word", ID: "1764587220000-0"},
	}
	b, err := audit.EncodeRecords(audit.Header{Room: "r", Node: "n1", Minute: audit.MinuteName(t0), Part: 3, Lost: 2}, in)
	if err != nil {
		t.Fatal(err)
	}
	h, out, err := audit.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := (audit.Header{Version: 1, Room: "r", Node: "n1", Minute: "20261201T1107Z", Part: 3, Records: 5, Lost: 2}); h != want {
		t.Fatalf("header %+v, want %+v", h, want)
	}
	if !equalRecords(out, in) {
		t.Fatalf("records:\n%+v\nwant\n%+v", out, in)
	}

	bad := []audit.Record{rec(t0, "r", "u\xff", "a\xffb", audit.Stored, "")}
	b, _ = audit.EncodeRecords(audit.Header{Room: "r"}, bad)
	if _, out, err := audit.Decode(b); err != nil || out[0].Text != "a\uFFFDb" || out[0].User != "u\uFFFD" {
		t.Fatalf("invalid UTF-8: %+v, %v", out, err)
	}
}

func equalRecords(a, b []audit.Record) bool {
	return slices.EqualFunc(a, b, func(x, y audit.Record) bool {
		x.At, y.At = x.At.Truncate(time.Millisecond).UTC(), y.At.Truncate(time.Millisecond).UTC()
		return reflect.DeepEqual(x, y)
	})
}

func gz(s string) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

// TestDecodeRejects: anything but a whole audit object is ErrBadObject.
func TestDecodeRejects(t *testing.T) {
	hdr := `{"audit":1,"room":"r","node":"n","minute":"20261201T1107Z","part":1,"records":1}` + "\n"
	line := `{"t":1764587220000,"room":"r","user":"u","text":"x","decision":"stored"}` + "\n"
	good := gz(hdr + line)
	if _, _, err := audit.Decode(good); err != nil {
		t.Fatalf("the good object: %v", err)
	}
	cases := map[string][]byte{
		"not gzip":         []byte(hdr + line),
		"empty":            gz(""),
		"truncated gzip":   good[:len(good)-6],
		"version":          gz(strings.Replace(hdr, `"audit":1`, `"audit":2`, 1) + line),
		"no room":          gz(strings.Replace(hdr, `"room":"r"`, `"room":""`, 1) + line),
		"negative lost":    gz(strings.Replace(hdr, `"records":1`, `"records":1,"lost":-1`, 1) + line),
		"header not json":  gz("audit\n" + line),
		"record not json":  gz(hdr + "{\n"),
		"other room":       gz(hdr + strings.Replace(line, `"room":"r"`, `"room":"q"`, 1)),
		"unknown decision": gz(hdr + strings.Replace(line, "stored", "kept", 1)),
		"no time":          gz(hdr + strings.Replace(line, "1764587220000", "0", 1)),
		"fewer records":    gz(hdr),
		"more records":     gz(hdr + line + line),
		"line too long":    gz(hdr + `{"t":1,"room":"r","text":"` + strings.Repeat("x", 70<<10) + `"}` + "\n"),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if _, _, err := audit.Decode(b); !errors.Is(err, audit.ErrBadObject) {
				t.Fatalf("Decode: %v, want ErrBadObject", err)
			}
		})
	}
}

// TestKeys: a room's keys sort by minute, and parse back.
func TestKeys(t *testing.T) {
	a := audit.ObjectKey("r", t0, "n2", "beef", 9)
	b := audit.ObjectKey("r", t0.Add(time.Minute), "n1", "beef", 1)
	c := audit.ObjectKey("r", t0.Add(10*time.Hour), "n1", "beef", 1)
	if !(a < b && b < c) {
		t.Fatalf("keys do not sort by minute: %s %s %s", a, b, c)
	}
	if a != "audit/r/20261201T1107Z/n2.beef.000009.jsonl.gz" {
		t.Fatalf("key %s", a)
	}
	room, m, ok := audit.KeyMinute(b)
	if !ok || room != "r" || !m.Equal(t0.Add(time.Minute)) {
		t.Fatalf("KeyMinute(%s) = %s %v %v", b, room, m, ok)
	}
	for _, k := range []string{"rooms/r/s/1.msgpack", "audit/r/notaminute/x", "audit/r", "audit//20261201T1107Z/x"} {
		if _, _, ok := audit.KeyMinute(k); ok {
			t.Fatalf("KeyMinute(%s) accepted", k)
		}
	}
}

// FuzzDecode: no input panics Decode, and what it accepts encodes back to
// the same records.
func FuzzDecode(f *testing.F) {
	good, _ := audit.EncodeRecords(audit.Header{Room: "r", Node: "n"}, []audit.Record{
		rec(t0, "r", "u", "hi \"there\"", audit.Stored, ""),
		rec(t0, "r", "v", "弹幕", audit.Dropped, "duplicate"),
	})
	f.Add(good)
	f.Add(gz(`{"audit":1,"room":"r","records":0,"lost":3}` + "\n"))
	f.Add(gz(`{"audit":1,"room":"r","records":1}` + "\n" + `{"t":5,"room":"r","decision":"masked","shown":"*"}`))
	f.Add([]byte{})
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, recs, err := audit.Decode(b)
		if err != nil {
			if !errors.Is(err, audit.ErrBadObject) {
				t.Fatalf("error outside ErrBadObject: %v", err)
			}
			return
		}
		again, err := audit.EncodeRecords(h, recs)
		if err != nil {
			t.Fatal(err)
		}
		h2, recs2, err := audit.Decode(again)
		if err != nil {
			t.Fatalf("re-encoded object does not decode: %v", err)
		}
		if h2 != h || !equalRecords(recs2, recs) {
			t.Fatalf("round trip changed the object:\n%+v %+v\n%+v %+v", h, recs, h2, recs2)
		}
	})
}

// FuzzRecordText: any text, user and reason encode to a line that
// decodes to the same strings (U+FFFD for invalid UTF-8).
func FuzzRecordText(f *testing.F) {
	f.Add("u", "hello", "duplicate")
	f.Add("\xff", "\x00\"\\\u2028", "")
	f.Fuzz(func(t *testing.T, user, text, reason string) {
		in := []audit.Record{rec(t0, "r", user, text, audit.Dropped, reason)}
		b, err := audit.EncodeRecords(audit.Header{Room: "r"}, in)
		if err != nil {
			t.Fatal(err)
		}
		_, out, err := audit.Decode(b)
		if err != nil {
			if strings.Contains(err.Error(), "token too long") {
				return // a fuzzed text far longer than any comment
			}
			t.Fatal(err)
		}
		// Each invalid byte becomes one U+FFFD.
		fix := func(s string) string {
			var b strings.Builder
			for _, r := range s {
				b.WriteRune(r)
			}
			return b.String()
		}
		if out[0].User != fix(user) || out[0].Text != fix(text) || out[0].Reason != fix(reason) {
			t.Fatalf("got %q %q %q, want %q %q %q", out[0].User, out[0].Text, out[0].Reason, user, text, reason)
		}
	})
}
