package event

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"danmaku/internal/clock"
	"danmaku/internal/httpx"
	"danmaku/internal/ident"
)

// API is the operator API for events, on gin: create, list, read, change
// at run time, end and delete. Every route needs an operator key
// (Authorization: Bearer). Answers carry each event's state.
type API struct {
	Store Store
	// Keys are the operator keys. Empty: every call is refused.
	Keys []string
	// Clock judges states and stamps early ends. Nil: real clock.
	Clock clock.Clock
	// Changed, when set, is called after every successful write, so that
	// the process's own Directory reflects it at once rather than within
	// its reload interval.
	Changed func(ctx context.Context)
	// Logger receives the store errors, which answers do not carry. Nil:
	// slog.Default().
	Logger *slog.Logger
}

// maxEventBody bounds a request body: 1,000 rooms with every setting fit.
const maxEventBody = 1 << 20

// View is an event as the API answers it.
type View struct {
	Event
	State State `json:"state"`
}

// Register adds the routes to r.
func (a *API) Register(r gin.IRoutes) {
	auth := func(c *gin.Context) {
		if !httpx.KeyMatches(c, a.Keys) {
			httpx.Abort(c, httpx.Errorf(http.StatusUnauthorized, "bad_operator_key", "the events API needs an operator key"))
		}
	}
	r.GET("/v1/admin/events", auth, a.list)
	r.POST("/v1/admin/events", auth, a.create)
	r.GET("/v1/admin/events/:id", auth, a.get)
	r.PUT("/v1/admin/events/:id", auth, a.update)
	r.POST("/v1/admin/events/:id/end", auth, a.end)
	r.DELETE("/v1/admin/events/:id", auth, a.delete)
}

func (a *API) now() time.Time { return clock.Or(a.Clock).Now() }

func (a *API) view(e Event) View { return View{Event: e, State: e.StateAt(a.now())} }

func (a *API) changed(ctx context.Context) {
	if a.Changed != nil {
		a.Changed(ctx)
	}
}

// fail answers a validation or store error of op with its code. The coded
// and sentinel errors' texts are the client's to read; any other is logged
// and answered with a fixed message, since its text (a Redis address, a
// key, a driver's internals) is nothing a client can act on.
func (a *API) fail(c *gin.Context, op string, err error) {
	var e *httpx.Error
	switch {
	case errors.As(err, &e):
	case errors.Is(err, ErrInvalid):
		e = httpx.Errorf(http.StatusBadRequest, "bad_event", "%v", err)
	case errors.Is(err, ErrNotFound):
		e = httpx.Errorf(http.StatusNotFound, "no_such_event", "%v", err)
	case errors.Is(err, ErrExists):
		e = httpx.Errorf(http.StatusConflict, "event_exists", "%v", err)
	default:
		log := a.Logger
		if log == nil {
			log = slog.Default()
		}
		log.ErrorContext(c.Request.Context(), "event: store failed", "op", op, "route", c.FullPath(), "err", err)
		e = httpx.Errorf(http.StatusServiceUnavailable, "backend_unavailable", "events store unavailable; nothing changed")
		e.RetryAfter = time.Second
	}
	httpx.Abort(c, e)
}

func (a *API) list(c *gin.Context) {
	events, err := a.Store.List(c.Request.Context())
	if err != nil {
		a.fail(c, "list events", err)
		return
	}
	out := make([]View, 0, len(events))
	for _, e := range events {
		out = append(out, a.view(e))
	}
	c.JSON(http.StatusOK, gin.H{"events": out})
}

func (a *API) get(c *gin.Context) {
	e, err := a.Store.Get(c.Request.Context(), c.Param("id"))
	if err != nil {
		a.fail(c, "get event", err)
		return
	}
	c.JSON(http.StatusOK, a.view(e))
}

// decode reads and validates an event body.
func (a *API) decode(c *gin.Context) (Event, bool) {
	var e Event
	if err := httpx.BindJSON(c, maxEventBody, &e); err != nil {
		httpx.Abort(c, err)
		return Event{}, false
	}
	// The title is cleaned as comments are (the answer shows what is
	// kept); Validate refuses an uncleaned one from elsewhere (a file).
	e.Title = ident.CleanText(e.Title)
	if err := e.Validate(); err != nil {
		a.fail(c, "validate event", err)
		return Event{}, false
	}
	return e, true
}

// free checks that none of e's rooms belongs to another event that is not
// over: a room is in one event at a time.
func (a *API) free(ctx context.Context, e *Event) error {
	events, err := a.Store.List(ctx)
	if err != nil {
		return err
	}
	now := a.now()
	for i := range events {
		if room, clash := e.Overlaps(&events[i], now); clash {
			return httpx.Errorf(http.StatusConflict, "room_taken", "room %q belongs to event %q, which is not over", room, events[i].ID)
		}
	}
	return nil
}

func (a *API) create(c *gin.Context) {
	e, ok := a.decode(c)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	e.EndedAt = nil
	if err := a.free(ctx, &e); err != nil {
		a.fail(c, "check rooms", err)
		return
	}
	if err := a.Store.Create(ctx, e); err != nil {
		a.fail(c, "create event", err)
		return
	}
	a.changed(ctx)
	c.JSON(http.StatusCreated, a.view(e))
}

// update replaces an event at run time: settings, times, rooms. An ended
// event stays ended.
func (a *API) update(c *gin.Context) {
	e, ok := a.decode(c)
	if !ok {
		return
	}
	if e.ID != c.Param("id") {
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_event", "event: invalid: id: the body's id %q is not the path's %q", e.ID, c.Param("id")))
		return
	}
	ctx := c.Request.Context()
	old, err := a.Store.Get(ctx, e.ID)
	if err != nil {
		a.fail(c, "get event", err)
		return
	}
	if old.StateAt(a.now()) == Ended {
		httpx.Abort(c, httpx.Errorf(http.StatusConflict, "event_ended", "event %q has ended; create a new one", e.ID))
		return
	}
	e.EndedAt = old.EndedAt
	if err := a.free(ctx, &e); err != nil {
		a.fail(c, "check rooms", err)
		return
	}
	if err := a.Store.Update(ctx, e); err != nil {
		a.fail(c, "update event", err)
		return
	}
	a.changed(ctx)
	c.JSON(http.StatusOK, a.view(e))
}

// end ends an event now: its rooms write their last segments and close.
func (a *API) end(c *gin.Context) {
	ctx := c.Request.Context()
	e, err := a.Store.Get(ctx, c.Param("id"))
	if err != nil {
		a.fail(c, "get event", err)
		return
	}
	if e.StateAt(a.now()) != Ended {
		now := a.now()
		e.EndedAt = &now
		if err := a.Store.Update(ctx, e); err != nil {
			a.fail(c, "end event", err)
			return
		}
		a.changed(ctx)
	}
	c.JSON(http.StatusOK, a.view(e))
}

// delete forgets an event that is over; a live or scheduled one must be
// ended first, so no room vanishes under its viewers.
func (a *API) delete(c *gin.Context) {
	ctx := c.Request.Context()
	e, err := a.Store.Get(ctx, c.Param("id"))
	if err != nil {
		a.fail(c, "get event", err)
		return
	}
	if e.StateAt(a.now()) != Ended {
		httpx.Abort(c, httpx.Errorf(http.StatusConflict, "event_not_ended", "end event %q before deleting it", e.ID))
		return
	}
	if err := a.Store.Delete(ctx, e.ID); err != nil {
		a.fail(c, "delete event", err)
		return
	}
	a.changed(ctx)
	c.JSON(http.StatusOK, gin.H{"ok": true})
}

// RoomHTTPError is how a handler answers Directory.Check's refusal: 503
// events_unavailable (retry after a second), 404 no_such_room, 409
// room_not_live, with Check's message.
func RoomHTTPError(err error) *httpx.Error {
	var re *RoomError
	if !errors.As(err, &re) {
		return httpx.Errorf(http.StatusInternalServerError, httpx.CodeInternal, "internal error")
	}
	switch {
	case errors.Is(err, ErrNotLoaded):
		e := httpx.Errorf(http.StatusServiceUnavailable, "events_unavailable", "%s", re.Message)
		e.RetryAfter = time.Second
		return e
	case errors.Is(err, ErrNoSuchRoom):
		return httpx.Errorf(http.StatusNotFound, "no_such_room", "%s", re.Message)
	case errors.Is(err, ErrRoomNotLive):
		return httpx.Errorf(http.StatusConflict, "room_not_live", "%s", re.Message)
	}
	return httpx.Errorf(http.StatusInternalServerError, httpx.CodeInternal, "internal error")
}
