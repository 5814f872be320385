package redisx

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/testenv"
)

func TestRoomKey(t *testing.T) {
	if got, want := RoomKey("concert-1", "leader"), "danmaku:{room:concert-1}:leader"; got != want {
		t.Fatalf("RoomKey = %q, want %q", got, want)
	}
}

func TestPX(t *testing.T) {
	cases := []struct {
		ttl  time.Duration
		want int64
		err  bool
	}{
		{2 * time.Second, 2000, false},
		{1500 * time.Microsecond, 2, false}, // rounded up
		{time.Nanosecond, 1, false},         // never 0, which Redis refuses
		{0, 0, true},
		{-time.Second, 0, true},
	}
	for _, c := range cases {
		got, err := PX(c.ttl)
		if got != c.want || (err != nil) != c.err || (err != nil && !errors.Is(err, ErrTTL)) {
			t.Errorf("PX(%v) = %d, %v; want %d, error %v", c.ttl, got, err, c.want, c.err)
		}
	}
}

// TestNewClient checks how a Config becomes client options, without a server.
func TestNewClient(t *testing.T) {
	type want struct {
		cluster           bool
		addrs             []string
		user, pass        string
		db                int
		dial, read, write time.Duration
		tls               bool
	}
	cases := []struct {
		name string
		cfg  Config
		want want
	}{
		{"bare address", Config{URL: "10.0.0.5:6379"},
			want{addrs: []string{"10.0.0.5:6379"}, dial: 2 * time.Second, read: time.Second, write: time.Second}},
		{"URL with ACL user and db", Config{URL: "redis://verifier:s3cret@redis.internal:6380/2"},
			want{addrs: []string{"redis.internal:6380"}, user: "verifier", pass: "s3cret", db: 2, dial: 2 * time.Second, read: time.Second, write: time.Second}},
		{"Config credentials override the URL's", Config{URL: "redis://a:b@h:1", Username: "auth-center", Password: "pw"},
			want{addrs: []string{"h:1"}, user: "auth-center", pass: "pw", dial: 2 * time.Second, read: time.Second, write: time.Second}},
		{"URL timeouts win over defaults", Config{URL: "redis://h:1?read_timeout=3s&dial_timeout=4s", IOTimeout: 9 * time.Second},
			want{addrs: []string{"h:1"}, dial: 4 * time.Second, read: 3 * time.Second, write: 9 * time.Second}},
		{"Config timeouts", Config{URL: "h:1", DialTimeout: 7 * time.Second, IOTimeout: 300 * time.Millisecond},
			want{addrs: []string{"h:1"}, dial: 7 * time.Second, read: 300 * time.Millisecond, write: 300 * time.Millisecond}},
		{"TLS", Config{URL: "rediss://h:1"},
			want{addrs: []string{"h:1"}, tls: true, dial: 2 * time.Second, read: time.Second, write: time.Second}},
		{"several addresses make a cluster", Config{URL: "a:1, b:2,c:3", Password: "pw"},
			want{cluster: true, addrs: []string{"a:1", "b:2", "c:3"}, pass: "pw", dial: 2 * time.Second, read: time.Second, write: time.Second}},
		{"cluster configuration endpoint", Config{URL: "redis://u:p@cfg.cache:6379?addr=b:2", Cluster: true},
			want{cluster: true, addrs: []string{"cfg.cache:6379", "b:2"}, user: "u", pass: "p", dial: 2 * time.Second, read: time.Second, write: time.Second}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rc, _, err := newClient(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			var got want
			switch cl := rc.(type) {
			case *redis.Client:
				o := cl.Options()
				if !o.ContextTimeoutEnabled {
					t.Error("ContextTimeoutEnabled is off")
				}
				got = want{false, []string{o.Addr}, o.Username, o.Password, o.DB, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.TLSConfig != nil}
			case *redis.ClusterClient:
				o := cl.Options()
				if !o.ContextTimeoutEnabled {
					t.Error("ContextTimeoutEnabled is off")
				}
				got = want{true, o.Addrs, o.Username, o.Password, 0, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.TLSConfig != nil}
			default:
				t.Fatalf("client is a %T", rc)
			}
			if strings.Join(got.addrs, ",") != strings.Join(c.want.addrs, ",") {
				t.Errorf("addrs = %v, want %v", got.addrs, c.want.addrs)
			}
			got.addrs, c.want.addrs = nil, nil
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("options = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestNewClientErrors(t *testing.T) {
	cases := []struct {
		name string
		url  string
		want error
	}{
		{"empty", "", ErrNoAddr},
		{"blank", "  ", ErrNoAddr},
		{"only commas", ",,", ErrNoAddr},
		{"bad scheme", "http://h:1", nil},
		{"unknown option", "redis://h:1?bogus=1", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rc, _, err := newClient(Config{URL: c.url})
			if err == nil {
				rc.Close()
				t.Fatal("no error")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	// A malformed URL's error must not carry its password into logs.
	_, _, err := newClient(Config{URL: "redis://user:hunter2@h:1/%zz"})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("err = %v, want an error without the password", err)
	}
}

func TestConnect(t *testing.T) {
	addr := testenv.Redis(t)
	ctx := context.Background()

	c, err := Connect(ctx, Config{URL: "redis://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ACLSetUser(ctx, "reader", "on", ">pw", "resetkeys", "~k", "-@all", "+get", "+ping").Err(); err != nil {
		t.Fatal(err)
	}

	r, err := Connect(ctx, Config{URL: addr, Username: "reader", Password: "pw"})
	if err != nil {
		t.Fatalf("connect as an ACL user: %v", err)
	}
	defer r.Close()
	if got, err := r.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET as reader = %q, %v", got, err)
	}

	if _, err := Connect(ctx, Config{URL: addr, Username: "reader", Password: "hunter2"}); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("wrong password: err = %v, want an error without the password", err)
	}

	// Nothing listens on a port just closed: Connect fails within ctx.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := Connect(cctx, Config{URL: dead}); err == nil {
		t.Fatal("connect to a closed port succeeded")
	}
}

// TestRoundTrips: every client Connect makes counts its round trips, a
// pipeline as one.
func TestRoundTrips(t *testing.T) {
	addr := testenv.Redis(t)
	ctx := context.Background()
	c, err := Connect(ctx, Config{URL: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ops := func() {
		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for range 10 {
				p.Incr(ctx, "n")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	ops() // the connection's handshake counts too: not in what is measured
	before := RoundTrips()
	ops()
	if got := RoundTrips() - before; got != 2 {
		t.Fatalf("%v round trips for a SET and a pipeline of 10, want 2", got)
	}
}
