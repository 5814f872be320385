package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"danmaku/auth"
	"danmaku/internal/stack"
	"danmaku/sdk"
)

const defaultEntry = "http://" + stack.DefaultGSLBAddr

var httpClient = &http.Client{Timeout: 10 * time.Second}

type identity struct {
	entry, room, user, nick, role, ticket string
}

func (id *identity) register(fs interface {
	StringVar(*string, string, string, string)
}, defaultUser, defaultRole string) {
	fs.StringVar(&id.entry, "entry", defaultEntry, "entry endpoint (gslb) base URL")
	fs.StringVar(&id.room, "room", stack.DemoRoom, "room id")
	fs.StringVar(&id.user, "user", defaultUser, "user id (for a dev ticket)")
	fs.StringVar(&id.nick, "nick", "", "nickname (for a dev ticket; default: the user id)")
	fs.StringVar(&id.role, "role", defaultRole, "viewer, host or admin (for a dev ticket)")
	fs.StringVar(&id.ticket, "ticket", "", "business ticket (default: mint one with the dev ticket key)")
}

func (id *identity) getTicket() (string, error) {
	if id.ticket != "" {
		return id.ticket, nil
	}
	nick := id.nick
	if nick == "" {
		nick = id.user
	}
	// Scoped to the room: host and admin hold only where a ticket names
	// the room, and a dev ticket acts in one room.
	return auth.MintTicket(auth.DevTicketKey, id.user, auth.Ticket{Nick: nick, Role: id.role, Rooms: []string{id.room}}, 24*time.Hour)
}

func runTicket(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("ticket", stderr)
	user := fs.String("user", "alice", "user id")
	nick := fs.String("nick", "", "nickname (default: the user id)")
	role := fs.String("role", auth.RoleViewer, "viewer, host or admin")
	ttl := fs.Duration("ttl", 24*time.Hour, "lifetime (the gslb refuses more than its -ticket-max-lifetime, 24h by default)")
	rooms := fs.String("rooms", "", "comma list of the rooms the ticket admits, where a host or admin role holds (default: any room, as a viewer)")
	event := fs.String("event", "", "the event whose rooms the ticket admits, where a host or admin role holds (default: any)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if !auth.ValidRole(*role) {
		return usageError{fmt.Errorf("bad -role %q", *role)}
	}
	var scope []string
	if *rooms != "" {
		scope = strings.Split(*rooms, ",")
	}
	if *nick == "" {
		*nick = *user
	}
	t, err := auth.MintTicket(auth.DevTicketKey, *user, auth.Ticket{Nick: *nick, Role: *role, Rooms: scope, Event: *event}, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, t)
	return nil
}

// apiCall sends a JSON request (a []byte body as it is: a document) and
// decodes a JSON answer, turning coded error answers into errors.
func apiCall(ctx context.Context, method, u, bearer string, body, out any) error {
	var rd io.Reader
	raw, isRaw := body.([]byte)
	switch {
	case isRaw:
		rd = bytes.NewReader(raw)
	case body != nil:
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	switch {
	case isRaw:
		req.Header.Set("Content-Type", "application/octet-stream")
	case body != nil:
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
			return fmt.Errorf("%s %s: %d %s: %s", method, u, resp.StatusCode, e.Error.Code, e.Error.Message)
		}
		return fmt.Errorf("%s %s: %s", method, u, resp.Status)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func join(ctx context.Context, id *identity) (*sdk.Entry, error) {
	ticket, err := id.getTicket()
	if err != nil {
		return nil, err
	}
	var e sdk.Entry
	u := strings.TrimSuffix(id.entry, "/") + "/v1/entry?room=" + url.QueryEscape(id.room)
	// A freshly started stack answers 503 until its nodes have reported.
	for attempt := 0; ; attempt++ {
		err = apiCall(ctx, http.MethodGet, u, ticket, nil, &e)
		if err == nil || attempt >= 20 || !strings.Contains(err.Error(), " 503 ") {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, err
	}
	if len(e.Ingest) == 0 {
		return nil, errors.New("entry handed out no ingest address")
	}
	return &e, nil
}

func runSend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("send", stderr)
	var id identity
	id.register(fs, "alice", auth.RoleViewer)
	if err := parse(fs, args); err != nil {
		return err
	}
	text := strings.Join(fs.Args(), " ")
	if text == "" {
		return usageError{errors.New("usage: danmaku send [flags] TEXT")}
	}
	e, err := join(ctx, &id)
	if err != nil {
		return err
	}
	u := e.Ingest[0] + "/v1/rooms/" + url.PathEscape(e.Room) + "/barrage"
	if err := apiCall(ctx, http.MethodPost, u, e.Token, map[string]string{"text": text}, nil); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sent to room %s as %s: %s\n", e.Room, e.User, text)
	return nil
}

func runAnnounce(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("announce", stderr)
	var id identity
	id.register(fs, "host", auth.RoleHost)
	if err := parse(fs, args); err != nil {
		return err
	}
	text := strings.Join(fs.Args(), " ")
	if text == "" {
		return usageError{errors.New("usage: danmaku announce [flags] TEXT")}
	}
	e, err := join(ctx, &id)
	if err != nil {
		return err
	}
	var out struct{ ID string }
	u := e.Ingest[0] + "/v1/rooms/" + url.PathEscape(e.Room) + "/announce"
	if err := apiCall(ctx, http.MethodPost, u, e.Token, map[string]string{"text": text}, &out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "announced in room %s: id %s\n", e.Room, out.ID)
	return nil
}

func runGift(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gift", stderr)
	ingestURL := fs.String("ingest", "http://"+stack.DefaultIngestAddr, "ingest base URL")
	key := fs.String("key", stack.DevServiceKey, "service key of the gift API")
	room := fs.String("room", stack.DemoRoom, "room id")
	user := fs.String("user", "bob", "sender's user id")
	nick := fs.String("nick", "", "sender's nickname")
	gift := fs.String("gift", "rose", "gift code")
	value := fs.Int64("value", 100, "value of one gift")
	count := fs.Uint("count", 1, "number of gifts")
	order := fs.String("order", "", "order id (idempotency key; default: generated)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *order == "" {
		*order = fmt.Sprintf("cli-%d", time.Now().UnixNano())
	}
	body := map[string]any{"order_id": *order, "room": *room, "user": *user, "nick": *nick, "gift": *gift, "value": *value, "count": *count}
	var out struct {
		ID        string
		Duplicate bool
	}
	if err := apiCall(ctx, http.MethodPost, strings.TrimSuffix(*ingestURL, "/")+"/v1/gifts", *key, body, &out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "gift %s accepted: id %s duplicate=%v\n", *order, out.ID, out.Duplicate)
	return nil
}

func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("watch", stderr)
	var id identity
	id.register(fs, "watcher", auth.RoleViewer)
	n := fs.Int("n", 0, "exit after this many messages (0: run until interrupted)")
	dur := fs.Duration("for", 0, "exit after this long (0: run until interrupted)")
	asJSON := fs.Bool("json", false, "print messages as JSON lines")
	if err := parse(fs, args); err != nil {
		return err
	}
	ticket, err := id.getTicket()
	if err != nil {
		return err
	}
	log, _ := newLogger(stderr, "warn", false)
	c, err := sdk.New(sdk.Config{EntryURL: id.entry, Room: id.room, Ticket: ticket, Logger: log, FirstJoinJitter: -1})
	if err != nil {
		return usageError{err}
	}
	if *dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	fmt.Fprintf(stdout, "watching room %s\n", id.room)
	seen := 0
	enc := json.NewEncoder(stdout)
	for {
		select {
		case m, ok := <-c.Messages():
			if !ok { // Run has returned
				return <-errc
			}
			if *asJSON {
				_ = enc.Encode(m)
			} else {
				fmt.Fprintln(stdout, formatMessage(m))
			}
			seen++
			if *n > 0 && seen >= *n {
				cancel()
				<-errc
				return nil
			}
		case err := <-errc:
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

func formatMessage(m sdk.Message) string {
	who := m.Nick
	if who == "" {
		who = m.User
	}
	switch m.Kind {
	case sdk.KindGift:
		return fmt.Sprintf("%s gift    %s sent %s x%d (value %d)", m.ID, who, m.Gift, max(m.Count, 1), m.Value)
	case sdk.KindSystem:
		return fmt.Sprintf("%s system  [%s] %s", m.ID, m.Role, m.Text)
	}
	return fmt.Sprintf("%s barrage %s: %s", m.ID, who, m.Text)
}

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", stderr)
	cdn := fs.String("cdn", "http://"+stack.DefaultOriginAddr+"/", "CDN (or origin) base URL")
	room := fs.String("room", stack.DemoRoom, "room id")
	from := fs.Int64("from", 0, "first unix second (default: -last seconds ago)")
	to := fs.Int64("to", 0, "unix second after the last (default: now)")
	last := fs.Duration("last", time.Minute, "with no -from: how far back to start")
	asJSON := fs.Bool("json", false, "print messages as JSON lines")
	if err := parse(fs, args); err != nil {
		return err
	}
	now := time.Now().Unix()
	if *to == 0 {
		*to = now
	}
	if *from == 0 {
		*from = *to - int64(last.Seconds())
	}
	if *from >= *to {
		return usageError{fmt.Errorf("-from %d must be before -to %d", *from, *to)}
	}
	enc := json.NewEncoder(stdout)
	n := 0
	err := sdk.Replay(ctx, *cdn, *room, *from, *to, func(m sdk.Message) error {
		n++
		if *asJSON {
			return enc.Encode(m)
		}
		_, err := fmt.Fprintln(stdout, formatMessage(m))
		return err
	})
	fmt.Fprintf(stderr, "replayed %d messages of room %s, seconds %d..%d\n", n, *room, *from, *to-1)
	return err
}
