package ingest

import (
	"errors"
	"net/http"

	"danmaku/internal/httpx"
	"danmaku/internal/ident"
	"danmaku/sdk/wire"
)

// maxGiftCount bounds a gift's count: a combo of a hundred thousand is
// already more than any client animates.
const maxGiftCount = 100000

// check validates a gift request's fields and cleans its nickname in place,
// answering 400 bad_field naming the first field that breaks its rule. The
// identity fields follow internal/ident, the rules business tickets are
// verified by, because a gift's user, nickname and avatar are copied into
// the room stream and every segment just as a viewer's are: user, order id,
// gift code and avatar are refused when they break a rule (they are keys or
// references), the nickname is cleaned and cut to what the wire carries.
// It replaces validate.
func (g *GiftRequest) check() *httpx.Error {
	if err := ident.CheckOrder(g.OrderID); err != nil {
		return fieldError(err)
	}
	if !wire.ValidRoom(g.Room) {
		return badField("room", "required, 1-64 of A-Z a-z 0-9 _ -")
	}
	if err := ident.CheckUser(g.User); err != nil {
		return fieldError(err)
	}
	if err := ident.CheckGift(g.Gift); err != nil {
		return fieldError(err)
	}
	switch {
	case g.Value == nil:
		return badField("value", "required")
	case *g.Value < 0:
		return badField("value", "must be 0 or more")
	case g.Count > maxGiftCount:
		return badField("count", "at most 100000")
	}
	nick, err := ident.CleanNick(g.Nick)
	if err != nil {
		return fieldError(err)
	}
	if err := ident.CheckAvatar(g.Avatar); err != nil {
		return fieldError(err)
	}
	g.Nick = nick
	return nil
}

func badField(field, rule string) *httpx.Error {
	return httpx.Errorf(http.StatusBadRequest, "bad_field", "field %q: %s", field, rule)
}

// fieldError answers an identity rule broken; ident's field names are the
// gift request's JSON names.
func fieldError(err error) *httpx.Error {
	var ie *ident.Error
	if errors.As(err, &ie) {
		return badField(ie.Field, ie.Reason)
	}
	return httpx.Errorf(http.StatusBadRequest, "bad_field", "%v", err)
}
