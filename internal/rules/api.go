package rules

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"danmaku/internal/clock"
	"danmaku/internal/httpx"
	"danmaku/internal/ident"
	"danmaku/internal/ratelimit"
)

// API is the operators' HTTP API of the documents, on the ingest beside
// the bans API (docs/api.md, "Rules"):
//
//	PUT  /v1/admin/rules/{kind}?note=...          body: the document → the new version
//	GET  /v1/admin/rules/{kind}?version=N          → the version (head by default) and its document
//	GET  /v1/admin/rules/{kind}/history?n=20       → {"versions": [...]}, newest first
//	POST /v1/admin/rules/{kind}/rollback?to=N&note=... → the new version (a copy of N; default the one before the head)
//
// Every route needs an operator key (Authorization: Bearer). A document is
// checked whole before it is stored: a bad one is refused with its Check's
// code and the field named, and the version in force stays. A push is
// recorded with the key's fingerprint, the time and the note (the history
// is the audit trail of who pushed what).
type API struct {
	Store Store
	// Kinds are the kinds served, each with its Check. A kind not listed
	// is answered 404 unknown_kind.
	Kinds map[string]Check
	// Keys are the operator keys. Empty: every call is refused.
	Keys []string
	// Clock stamps versions. Nil: the real clock.
	Clock clock.Clock
	// Changed, when set, is called after every push and rollback, so that
	// the process's own nodes use the new version at once (the others
	// within their poll).
	Changed func(ctx context.Context, kind string)
	// Logger receives store errors and every push. Nil: slog.Default().
	Logger *slog.Logger
}

// VersionAnswer is the answer of GET /v1/admin/rules/{kind}.
type VersionAnswer struct {
	Version
	Document string `json:"document"`
}

// Codes of the API's refusals besides the checks'.
const (
	CodeUnknownKind = "unknown_kind"
	CodeNoVersion   = "no_version"
	CodeBadNote     = "bad_note"
)

// defaultHistory is how many versions history lists unless asked.
const defaultHistory = 20

// Register adds the routes to r.
func (a *API) Register(r gin.IRoutes) {
	r.GET("/v1/admin/rules/:kind", a.auth, a.get)
	r.PUT("/v1/admin/rules/:kind", a.auth, a.push)
	r.GET("/v1/admin/rules/:kind/history", a.auth, a.history)
	r.POST("/v1/admin/rules/:kind/rollback", a.auth, a.rollback)
}

func (a *API) log() *slog.Logger {
	if a.Logger == nil {
		return slog.Default()
	}
	return a.Logger
}

// auth refuses a call without an operator key, and a kind not served.
func (a *API) auth(c *gin.Context) {
	if !httpx.KeyMatches(c, a.Keys) {
		httpx.Abort(c, httpx.Errorf(http.StatusUnauthorized, "bad_operator_key", "the rules API needs an operator key"))
		return
	}
	if _, ok := a.Kinds[c.Param("kind")]; !ok {
		httpx.Abort(c, httpx.Errorf(http.StatusNotFound, CodeUnknownKind, "no documents of kind %q; the kinds are words and limits", c.Param("kind")))
	}
}

// meta is a write's record: the caller's key fingerprint, now, the note.
func (a *API) meta(c *gin.Context) (Meta, *httpx.Error) {
	note := c.Query("note")
	switch {
	case len(note) > MaxNote:
		return Meta{}, httpx.Errorf(http.StatusBadRequest, CodeBadNote, "note: at most %d bytes (got %d)", MaxNote, len(note))
	case note != ident.CleanText(note):
		return Meta{}, httpx.Errorf(http.StatusBadRequest, CodeBadNote, "note: control or format characters, or white space to collapse")
	}
	return Meta{By: ratelimit.Fingerprint(httpx.BearerToken(c, "")), At: clock.Or(a.Clock).Now().UTC(), Note: note}, nil
}

// queryInt reads an optional positive whole number from the query.
func queryInt(c *gin.Context, name string) (int64, *httpx.Error) {
	s, ok := c.GetQuery(name)
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return 0, httpx.Errorf(http.StatusBadRequest, httpx.CodeBadRequest, "%s: want a whole number from 1 (got %q)", name, s)
	}
	return n, nil
}

func (a *API) storeError(c *gin.Context, op string, err error) {
	if errors.Is(err, ErrNoVersion) {
		httpx.Abort(c, httpx.Errorf(http.StatusNotFound, CodeNoVersion, "%s: no such version (never pushed, or older than the last %d)", c.Param("kind"), KeepVersions))
		return
	}
	a.log().ErrorContext(c.Request.Context(), "rules: store failed", "op", op, "kind", c.Param("kind"), "err", err)
	e := httpx.Errorf(http.StatusServiceUnavailable, "backend_unavailable", "rules store unavailable; nothing changed")
	e.RetryAfter = time.Second
	httpx.Abort(c, e)
}

// refused answers a document its Check refused.
func refused(c *gin.Context, err error) {
	bd, ok := errors.AsType[*BadDocument](err)
	if !ok {
		bd = &BadDocument{Code: httpx.CodeBadRequest, Message: err.Error()}
	}
	status := http.StatusBadRequest
	if bd.Code == httpx.CodeTooLarge {
		status = http.StatusRequestEntityTooLarge
	}
	httpx.Abort(c, httpx.Errorf(status, bd.Code, "%s; the version in force stays", bd.Message))
}

func (a *API) get(c *gin.Context) {
	v, e := queryInt(c, "version")
	if e != nil {
		httpx.Abort(c, e)
		return
	}
	d, err := a.Store.Get(c.Request.Context(), c.Param("kind"), v)
	if err != nil {
		a.storeError(c, "get", err)
		return
	}
	c.JSON(http.StatusOK, VersionAnswer{Version: d.Version, Document: string(d.Body)})
}

func (a *API) history(c *gin.Context) {
	n, e := queryInt(c, "n")
	if e != nil {
		httpx.Abort(c, e)
		return
	}
	if n == 0 {
		n = defaultHistory
	}
	vs, err := a.Store.History(c.Request.Context(), c.Param("kind"), int(min(n, KeepVersions)))
	if err != nil {
		a.storeError(c, "history", err)
		return
	}
	if vs == nil {
		vs = []Version{}
	}
	c.JSON(http.StatusOK, gin.H{"versions": vs})
}

func (a *API) push(c *gin.Context) {
	kind := c.Param("kind")
	m, e := a.meta(c)
	if e != nil {
		httpx.Abort(c, e)
		return
	}
	if c.Request.ContentLength > MaxDocument {
		refused(c, &BadDocument{Code: httpx.CodeTooLarge, Message: "a document holds at most 1 MiB"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, MaxDocument))
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		refused(c, &BadDocument{Code: httpx.CodeTooLarge, Message: "a document holds at most 1 MiB"})
		return
	}
	if err != nil {
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, httpx.CodeBadRequest, "body not read: %v", err))
		return
	}
	if err := a.Kinds[kind](body); err != nil {
		refused(c, err)
		return
	}
	v, err := a.Store.Push(c.Request.Context(), kind, body, m)
	if err != nil {
		a.storeError(c, "push", err)
		return
	}
	a.done(c, kind, v)
}

func (a *API) rollback(c *gin.Context) {
	kind := c.Param("kind")
	m, e := a.meta(c)
	if e != nil {
		httpx.Abort(c, e)
		return
	}
	to, e := queryInt(c, "to")
	if e != nil {
		httpx.Abort(c, e)
		return
	}
	v, err := Rollback(c.Request.Context(), a.Store, kind, to, m, a.Kinds[kind])
	if _, bad := errors.AsType[*BadDocument](err); bad {
		refused(c, err)
		return
	}
	if err != nil {
		a.storeError(c, "rollback", err)
		return
	}
	a.done(c, kind, v)
}

// done answers a write and lets the process's nodes know.
func (a *API) done(c *gin.Context, kind string, v Version) {
	a.log().Info("rules: new version in force", "kind", kind, "version", v.Version, "by", v.By, "rollback_of", v.RollbackOf, "sha256", v.SHA256, "note", v.Note)
	if a.Changed != nil {
		a.Changed(c.Request.Context(), kind)
	}
	c.JSON(http.StatusOK, v)
}
