package loadtable

// ShardKeysForTest returns the keys of node id's shard.
func ShardKeysForTest(id string) (nodes, log string) { return loadShardKeys(loadShardOf(id)) }
