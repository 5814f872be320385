// Package edge is the thin long connection every viewer holds: a WebSocket
// endpoint (GET /v1/ws) that pushes the gifts and system messages of the
// viewer's room in near-real time, resumes a reconnecting client from its
// last message id, and reports load and per-room online counts to the gslb.
//
// An idle connection holds no goroutine and no buffer: after the handshake
// a plain TCP socket is owned by one of the node's epoll loops (pollSock);
// TLS sockets keep a reader and a writer goroutine (goSock). A browser's
// socket, whose token comes in its first frame (the hello), waits for it
// in a loop too (helloWait); a TLS one on a goroutine. Framing uses
// github.com/gobwas/ws; the edge encodes its own frames once per room.
//
// # Data path
//
// Each room with at least one connection on this node has one hub. The hub's
// single reader goroutine tails the room's Live lane of the stream store,
// keeps the pushable messages (system messages; gifts worth at least
// Config.MinGiftValue) in a bounded ring for resume, and hands them to the
// hub's flusher, which encodes at most one batch of frames per merge window
// (Config.MergeWindow, never below 50 ms: faster frames get cut by
// middleboxes) and writes the same encoded frames to every connection's
// socket without blocking (what a socket does not take waits, bounded by
// Config.QueueSize frames). A connection that falls that far behind is never
// skipped: it is closed with CloseResume (4001) and the client reconnects
// with its last id, so a slow client neither stalls the room nor loses a
// gift. The hub is removed when its last connection leaves.
//
// # Ordering and resume
//
// Every connection receives the room's pushable messages in stream order,
// each exactly once. A connection that starts with last=<id> first receives
// every pushable message after id — from the hub's ring, or from the store
// when id is older than the ring — and then the live ones. The catch-up is
// computed under the hub lock at the moment the connection joins the
// fan-out, against the id of the last message handed to the fan-out, so the
// catch-up and the live stream meet with no gap and no duplicate. A
// connection without last receives what the hub has not yet fanned out when
// it joins, which includes everything appended after its handshake.
//
// # Concurrency
//
// A Server is safe for concurrent use. New starts no goroutine. Hubs start
// theirs (one reader, one flusher) on the first connection of a room and
// stop them when its last connection leaves; the node's epoll loops, its
// pinger and its site reader start with the first connection. A
// connection's catch-up is written by its handshake's goroutine; then the
// connection has no goroutine (a TLS one has a reader and a writer). Run
// runs the load reporter; Shutdown drains gradually (lame duck) and is safe
// to call more than once.
package edge
