package plan

import (
	"testing"
	"time"

	"danmaku/internal/loadtable"
)

// TestSyncDesignFigure ties the gslbs' Redis syncs in the plan to the code:
// a sync reads each shard's change log (one XRANGE a shard, pipelined), at
// most once every 5 ms. The figure was 400 (two commands a sync) until a
// count of the old mode's idle gslb read ~2,740 commands a second.
func TestSyncDesignFigure(t *testing.T) {
	const fastest = 5 * time.Millisecond // gslb's sync interval while the table changes
	want := float64(time.Second/fastest) * loadtable.Shards
	if got := DesignFigures()["redis_sync_cmds_per_gslb_s"].Value; got != want {
		t.Errorf("redis_sync_cmds_per_gslb_s = %g, want %g (%d shards x %d syncs a second)", got, want, loadtable.Shards, time.Second/fastest)
	}
}
