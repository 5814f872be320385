package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"danmaku/internal/hist"
)

// bindJSONLegacy is BindJSON before the strict scan, kept as the
// benchmark's baseline.
func bindJSONLegacy(c *gin.Context, limit int64, v any) *Error {
	body := http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, limit)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Errorf(http.StatusBadRequest, CodeBadJSON, "body holds more than one JSON value")
	}
	return nil
}

type benchText struct {
	Text *string `json:"text"`
}

// benchGift is the gift API's body (ingest.GiftRequest).
type benchGift struct {
	OrderID string `json:"order_id"`
	Room    string `json:"room"`
	User    string `json:"user"`
	Nick    string `json:"nick"`
	Avatar  string `json:"avatar"`
	Gift    string `json:"gift"`
	Value   *int64 `json:"value"`
	Count   uint32 `json:"count"`
}

// benchBodies are the hot path's bodies: a comment's (one per comment) and
// a gift's.
var benchBodies = []struct {
	name string
	body string
	v    func() any
}{
	{"comment", `{"text":"好听！这段太燃了 encore encore"}`, func() any { return new(benchText) }},
	{"gift", `{"order_id":"o-123456789","room":"demo","user":"u-42","nick":"小明","avatar":"a7","gift":"rocket","value":500,"count":2}`, func() any { return new(benchGift) }},
}

// benchBinder replays one body into a reused gin context, as a server does
// for each request.
type benchBinder struct {
	body []byte
	r    *bytes.Reader
	rc   io.ReadCloser
	c    *gin.Context
}

func newBenchBinder(body string) *benchBinder {
	gin.SetMode(gin.ReleaseMode)
	bb := &benchBinder{body: []byte(body)}
	bb.r = bytes.NewReader(bb.body)
	bb.rc = io.NopCloser(bb.r)
	bb.c, _ = gin.CreateTestContext(httptest.NewRecorder())
	bb.c.Request = httptest.NewRequest(http.MethodPost, "/x", nil)
	return bb
}

func (bb *benchBinder) bind(b *testing.B, bind func(*gin.Context, int64, any) *Error, v any) {
	bb.r.Reset(bb.body)
	bb.c.Request.Body = bb.rc
	if e := bind(bb.c, 4<<10, v); e != nil {
		b.Fatal(e)
	}
}

// BenchmarkBindJSON: the cost of a comment's and a gift's body, strict
// against the encoding/json Decoder alone (legacy), in one run.
func BenchmarkBindJSON(b *testing.B) {
	for _, impl := range []struct {
		name string
		bind func(*gin.Context, int64, any) *Error
	}{{"strict", BindJSON}, {"legacy", bindJSONLegacy}} {
		for _, bc := range benchBodies {
			b.Run(impl.name+"/"+bc.name, func(b *testing.B) {
				bb := newBenchBinder(bc.body)
				b.ReportAllocs()
				b.SetBytes(int64(len(bb.body)))
				for b.Loop() {
					bb.bind(b, impl.bind, bc.v())
				}
			})
		}
	}
}

// BenchmarkBindJSONRatio alternates strict and legacy binds of one body
// within each iteration and reports the median time of each and their ratio
// (strict/legacy): the figure to watch, since the ingest binds one small body
// per comment. Medians of interleaved calls, so that a machine busy with
// other work (preemption, another process's burst) slows both alike and a
// stray pause does not land on one side. ns/op is one of each.
func BenchmarkBindJSONRatio(b *testing.B) {
	for _, bc := range benchBodies {
		b.Run(bc.name, func(b *testing.B) {
			bb := newBenchBinder(bc.body)
			var strict, legacy []time.Duration
			for i := 0; b.Loop(); i++ {
				// Alternate which goes first: the second finds the caches warm.
				first, second := BindJSON, bindJSONLegacy
				if i%2 == 1 {
					first, second = second, first
				}
				t0 := time.Now()
				bb.bind(b, first, bc.v())
				t1 := time.Now()
				bb.bind(b, second, bc.v())
				t2 := time.Now()
				s, l := t1.Sub(t0), t2.Sub(t1)
				if i%2 == 1 {
					s, l = l, s
				}
				strict, legacy = append(strict, s), append(legacy, l)
			}
			s, l := median(strict), median(legacy)
			b.ReportMetric(float64(s.Nanoseconds()), "strict-ns/op")
			b.ReportMetric(float64(l.Nanoseconds()), "legacy-ns/op")
			b.ReportMetric(float64(s)/float64(l), "strict/legacy")
		})
	}
}

func median(d []time.Duration) time.Duration { return hist.Quantile(d, 0.5) }
