package gslb

// LoadShardKeysForTest returns the keys of node id's shard.
func LoadShardKeysForTest(id string) (nodes, log string) { return loadShardKeys(loadShardOf(id)) }
