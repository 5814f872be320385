package edge

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

func FuzzParseLast(f *testing.F) {
	for _, s := range []string{
		"", "0-0", "1700000000000-3", "abc", "1-", "-1-0", "1-2-3", " 1-0", "1-0 ", "+1-0", "01-00",
		"9223372036854775807-18446744073709551615", "9223372036854775808-0", "1-18446744073709551616",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, ok, err := parseLast(s)
		switch {
		case err != nil:
			if ok {
				t.Fatalf("parseLast(%q): ok with error %v", s, err)
			}
			return
		case s == "":
			if ok {
				t.Fatal("empty last parsed as an id")
			}
			return
		case !ok:
			t.Fatalf("parseLast(%q): neither ok nor an error", s)
		}
		back, err := parseMsgID(id.String())
		if err != nil || back != id {
			t.Fatalf("parseLast(%q) = %v, which does not round-trip (%v, %v)", s, id, back, err)
		}
		if wire.CompareIDs(id.String(), s) != 0 {
			t.Fatalf("parseLast(%q) = %v names another position", s, id)
		}
	})
}

// FuzzHandshakeQuery throws arbitrary query strings at the endpoint with a
// valid token: the answer is always the coded 400 (a bad last, a token in
// the URL, or a plain GET that is no WebSocket handshake), never a panic or
// a 5xx.
func FuzzHandshakeQuery(f *testing.F) {
	keys := newKeyring(f, nil)
	s, err := New(Config{
		Store:    stream.NewMemoryStore(nil),
		Verifier: keys,
		Addr:     "ws://edge.test",
		// No connect rate: the fuzzer's handshakes would empty the bucket.
		ConnectRate: -1,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	tok := signToken(f, keys, "r1", "ws://edge.test")
	for _, q := range []string{"", "last=1-0", "last=abc", "last=%zz", "last=1-0&last=2-0", "token=x&last=", "last=" + string([]byte{0xff, 0})} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		req := httptest.NewRequest(http.MethodGet, Path, nil)
		req.URL.RawQuery = q
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest {
			t.Fatalf("query %q: status %d, body %s", q, rec.Code, rec.Body)
		}
		var v struct {
			Error struct{ Code string } `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || (v.Error.Code != CodeBadRequest && v.Error.Code != CodeTokenInURL) {
			t.Fatalf("query %q: body %s", q, rec.Body)
		}
	})
}

func FuzzParseReport(f *testing.F) {
	for _, s := range []string{
		`{"drops":1,"held":2}`, `{}`, `{"drops":-1}`, `{"drops":1e3}`, `{"drops":4294967296}`,
		`{"drops":1000001}`, `[1]`, `null`, ``, ` {"held":5} `, `{"drops":"1"}`, `{"x":{"y":[1,2]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseReport(b)
		if err != nil {
			if r != (report{}) {
				t.Fatalf("parseReport(%q): counts %+v with error", b, r)
			}
			return
		}
		if r.Drops > maxReportCount || r.Held > maxReportCount {
			t.Fatalf("parseReport(%q) = %+v, above the bound", b, r)
		}
	})
}

// FuzzParseClientFrame: the frame parser of the epoll loops never panics,
// never claims more than it was given, and agrees with the goSock's reader
// (readClientFrame over a bufio.Reader) on every input.
func FuzzParseClientFrame(f *testing.F) {
	f.Add([]byte{0x81, 0x82, 0, 0, 0, 0, '{', '}'})
	f.Add([]byte{0x89, 0x80, 1, 2, 3, 4})
	f.Add([]byte{0x82, 0xFE, 0x01, 0x00, 0, 0, 0, 0})
	f.Add([]byte{0x81, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})
	f.Add([]byte{0x81, 0x02, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 10
		a := append([]byte(nil), data...)
		fr, n, err := parseClientFrame(a, limit)
		if n < 0 || n > len(data) {
			t.Fatalf("took %d of %d bytes", n, len(data))
		}
		if err == nil && n > 0 && int64(len(fr.payload)) > limit {
			t.Fatalf("payload %d over the limit", len(fr.payload))
		}
		g, gerr := readClientFrame(bufio.NewReader(bytes.NewReader(data)), limit)
		switch {
		case err != nil:
			if gerr == nil {
				t.Fatalf("parse: %v; read: ok", err)
			}
		case n == 0:
			if gerr == nil {
				t.Fatalf("parse: incomplete; read: a frame")
			}
		default:
			if gerr != nil || g.op != fr.op || g.fin != fr.fin || !bytes.Equal(g.payload, fr.payload) {
				t.Fatalf("parse: %v %v %q; read: %v %v %q (%v)", fr.op, fr.fin, fr.payload, g.op, g.fin, g.payload, gerr)
			}
		}
	})
}
