// Package devmode holds the public constants of embedded mode (`danmaku
// dev`): its listen addresses, the room of its demo event and its service
// key. The composition root (internal/stack) serves them, and the CLI and
// the tools (internal/loadgen) default to them, from this one definition
// without importing the composition root. It imports nothing.
package devmode

// Listen addresses of embedded mode (docs/operations.md).
const (
	GSLBAddr   = "127.0.0.1:7700"
	IngestAddr = "127.0.0.1:7701"
	EdgeAddr   = "127.0.0.1:7702"
	OriginAddr = "127.0.0.1:7703"
	SlicerAddr = "127.0.0.1:7704"
)

// GSLBURL is the entry endpoint's base URL in embedded mode.
const GSLBURL = "http://" + GSLBAddr

// Room is the room of the event `danmaku dev` creates, so that the demo
// page, the CLI clients and the load generator work out of the box.
const Room = "demo"

// ServiceKey is every service key of `danmaku dev` (gift, announcement,
// operator). Public on purpose; refused everywhere else.
const ServiceKey = "dev-service-key"
