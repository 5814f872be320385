package edge

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"danmaku/sdk/wire"
)

// The handshake carries the client's protocol (proto; none is 1): one below
// the edge's minimum is refused before the upgrade with 426 naming the
// minimum, a malformed one with 400, and the current one connects.
func TestHandshakeProtocol(t *testing.T) {
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.MinProtocol = 2 }})
	bearer := http.Header{"Authorization": {"Bearer " + e.token("r1")}}
	for _, tt := range []struct {
		name   string
		query  url.Values
		status int
		code   string
	}{
		{"none: protocol 1", nil, http.StatusUpgradeRequired, CodeProtocolUnsupported},
		{"protocol 1", url.Values{"proto": {"1"}}, http.StatusUpgradeRequired, CodeProtocolUnsupported},
		{"zero", url.Values{"proto": {"0"}}, http.StatusBadRequest, CodeBadProtocol},
		{"leading zero", url.Values{"proto": {"02"}}, http.StatusBadRequest, CodeBadProtocol},
		{"too large", url.Values{"proto": {"1000"}}, http.StatusBadRequest, CodeBadProtocol},
		{"not a number", url.Values{"proto": {"x"}}, http.StatusBadRequest, CodeBadProtocol},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, e.ts.URL+Path+"?"+tt.query.Encode(), nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header = bearer.Clone()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusUpgradeRequired {
				b, _ := io.ReadAll(resp.Body)
				if !strings.Contains(string(b), "the minimum is 2") {
					t.Errorf("426 body %s does not name the minimum", b)
				}
				resp.Body = io.NopCloser(strings.NewReader(string(b)))
			}
			checkCoded(t, resp, tt.status, tt.code)
		})
	}
	// This SDK's protocol passes the check: the handshake goes on to the
	// upgrade (a plain GET without one is then a 400 bad_request).
	req, _ := http.NewRequest(http.MethodGet, e.ts.URL+Path+"?proto="+string(rune('0'+wire.Protocol)), nil)
	req.Header = bearer.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	checkCoded(t, resp, http.StatusBadRequest, CodeBadRequest)
}
