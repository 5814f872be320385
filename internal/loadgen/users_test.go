package loadgen

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"testing"
)

// A transport failure counts by class, and the report keeps the first raw
// text of each class: "network: eof" alone cannot tell a connection the
// server closed while idle from one broken mid-answer.
func TestNetErrorKeepsFirstText(t *testing.T) {
	var g Generator
	idle := &url.Error{Op: "Post", URL: "http://127.0.0.1:1/v1/barrage", Err: errors.New("http: server closed idle connection")}
	for _, err := range []error{
		&url.Error{Op: "Post", URL: "http://127.0.0.1:1/v1/barrage", Err: io.EOF},
		fmt.Errorf("gift: %w", io.ErrUnexpectedEOF),
		errors.New("dial tcp 127.0.0.1:1: connect: connection refused"),
		idle,
	} {
		g.netError(err)
	}
	var rep Report
	g.fillNetworkErrors(&rep)
	want := map[string]string{
		"eof":     `Post "http://127.0.0.1:1/v1/barrage": EOF`,
		"refused": "dial tcp 127.0.0.1:1: connect: connection refused",
		"error":   idle.Error(),
	}
	if len(rep.NetworkErrors) != len(want) {
		t.Fatalf("NetworkErrors = %q, want %q", rep.NetworkErrors, want)
	}
	for k, v := range want {
		if rep.NetworkErrors[k] != v {
			t.Errorf("NetworkErrors[%q] = %q, want %q", k, rep.NetworkErrors[k], v)
		}
	}
}
