// Package mobile is the mobile SDK: a facade of danmaku/sdk that gomobile
// binds to Java/Kotlin (an Android .aar) and Objective-C/Swift (an iOS
// .xcframework). Its exported API uses only what gobind can carry — strings,
// bools, int/int64, pointers to structs of those, interfaces of those,
// errors — so every message, counter and callback reaches the app as plain
// values. Policy (joining, clock, polling, de-duplication, send throttling,
// the render queue's drop rules) stays in danmaku/sdk; this package converts
// types and runs the client in the background. docs/mobile.md shows how an
// app embeds it.
//
// # Lifecycle
//
// NewClient checks the Config and starts nothing. Start runs the client in
// background goroutines: it joins the room, feeds every message it receives
// into the render queue and hands it to the Listener. Stop ends it; it may be
// called any number of times, from any thread, also from inside a callback,
// and does not wait. A stopped client cannot be started again: make a new one
// (the same goes for a ticket the entry endpoint refused, reported as
// ErrCodeJoinRefused).
//
// # Threading
//
// Every method of Client is safe to call from any thread. Next, SetHidden,
// Hidden, NewCount, OnScreen, Waiting, Stats, Role, Send and Stop never block
// on the network (at most on a short internal lock), so the UI thread may call
// them on every frame. Announce blocks until the client has joined and the
// ingest has answered: call it off the UI thread.
//
// Listener methods are called on a Go-owned background thread, never on the
// app's UI thread: an app that touches views must hop to it (Android:
// Handler(Looper.getMainLooper()).post or runOnUiThread; iOS:
// DispatchQueue.main.async). Calls never overlap: one callback returns before
// the next starts, and they come in order — OnState(StateJoining) first,
// OnState(StateLive) before the first OnMessage, and OnState(StateStopped)
// last, after which nothing else is called. While a callback runs, message
// delivery waits for it, so callbacks must return quickly; if they stall,
// the client drops barrage (never gifts) as danmaku/sdk documents. Once Stop
// has returned no OnMessage or OnState(StateLive) starts, but Stop does not
// wait for a callback already running; OnState(StateStopped) is the reliable
// end. After it the client lets go of the listener: until then it holds it,
// and with it whatever the listener refers to (on the app's side, a
// reference that neither garbage collector can break), so apps call Stop
// explicitly rather than from a finalizer or deinit.
//
// # Render queue
//
// Each client owns a render queue (danmaku/sdk RenderQueue): the app's frame
// loop pulls with Next until it returns nil; gifts and system messages come
// before waiting barrage; SetHidden(true) while the app is in the background
// pauses it and counts arrivals for an "N new" badge (NewCount). Its drops are
// reported to the edge as client render drops. OnMessage sees every message,
// including those the queue later drops: use one or the other for a given
// view, not both.
//
// # Takedowns
//
// A message a moderator takes down is never delivered once the client knows
// of it; one already delivered comes back as a notice of kind KindTakedown
// naming it (ID, TargetKind): OnMessage gets it after the message itself,
// the render queue drops the message if it still waits, and Next returns the
// notice when the message is on screen, so that the frame loop removes the
// element. gobind adds no method to Listener for it: apps that implemented
// Listener keep compiling, and a frame loop already switching on Kind gets
// one more case.
//
// # Errors
//
// Errors returned by the methods and passed to OnError carry a stable code:
// ErrorCode(err) returns one of the ErrCode constants or, for a coded answer
// of the server, the server's own code (docs/api.md, e.g. "forbidden" for an
// announcement with a viewer's ticket).
package mobile
