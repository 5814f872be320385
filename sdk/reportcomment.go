package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"danmaku/sdk/wire"
)

// Reasons a viewer may give for a report (Client.Report).
const (
	ReportSpam    = "spam"
	ReportAbuse   = "abuse"
	ReportIllegal = "illegal"
	ReportOther   = "other"
)

// ErrBadReport is returned by Report, before anything is sent, for a
// message id, kind or reason the ingest would refuse.
var ErrBadReport = errors.New("sdk: bad report")

// Report tells the room's moderators that the message id of kind (a
// Message's ID and Kind: wire.KindBarrage for a comment) breaks the rules,
// for reason (ReportSpam, ReportAbuse, ReportIllegal or ReportOther). A
// user's report of one message counts once: reporting it again succeeds and
// changes nothing. It waits for the first join, and goes to the ingest
// addresses in order as Send does (re-joining once on a refused token).
//
// Over the user's report allowance (a few at once, then one every several
// seconds) it returns an *APIError with Code "report_rate" and the
// RetryAfter the ingest asked for; it does not retry by itself.
func (c *Client) Report(ctx context.Context, id string, kind wire.Kind, reason string) error {
	if _, _, err := wire.ParseID(id); err != nil {
		return fmt.Errorf("%w: id %q is not a message id", ErrBadReport, id)
	}
	if kind != wire.KindBarrage && kind != wire.KindGift && kind != wire.KindSystem {
		return fmt.Errorf("%w: kind %d", ErrBadReport, kind)
	}
	if !slices.Contains([]string{ReportSpam, ReportAbuse, ReportIllegal, ReportOther}, reason) {
		return fmt.Errorf("%w: reason %q", ErrBadReport, reason)
	}
	if _, err := c.waitJoined(ctx); err != nil {
		return err
	}
	body, err := json.Marshal(struct {
		ID     string    `json:"id"`
		Kind   wire.Kind `json:"k"`
		Reason string    `json:"reason"`
	}{id, kind, reason})
	if err != nil {
		return fmt.Errorf("sdk: report: %w", err)
	}
	s := c.sess.Load()
	for rejoined := false; ; rejoined = true {
		lastErr := error(ErrNoIngest)
		for _, addr := range s.entry.Ingest {
			u := strings.TrimRight(addr, "/") + "/v1/rooms/" + c.cfg.Room + "/reports"
			err := c.reportOnce(ctx, u, s.entry.Token, body)
			if err == nil {
				return nil
			}
			lastErr = fmt.Errorf("sdk: report: %w", err)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// A network or server error, or a node that is not the
			// user's: the next address may take it. Any other refusal
			// (the allowance included) is the same everywhere.
			var ae *APIError
			if errors.As(err, &ae) && ae.Status < 500 && ae.Code != codeWrongNode && ae.Code != codeNotPrimary {
				break
			}
		}
		var ae *APIError
		if rejoined || !errors.As(lastErr, &ae) || ae.Status != http.StatusUnauthorized {
			return lastErr
		}
		if err := c.rejoin(ctx, s, c.cfg.RejoinJitter); err != nil {
			return err
		}
		s = c.sess.Load()
	}
}

// reportOnce posts one report: 202 (counted) and 200 (a duplicate) are
// success.
func (c *Client) reportOnce(ctx context.Context, url, token string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		return readAPIError(resp)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	return nil
}
