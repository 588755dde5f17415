package redis

// ClusterSlot is clusterSlot, for the Cluster test to compare with Redis.
var ClusterSlot = clusterSlot

// SetBatchScript chooses how a batch travels on a single node: one EVAL
// (true) or a pipeline of the items' scripts (false); it returns a function
// that restores the choice.
func SetBatchScript(on bool) func() {
	old := oneScript
	oneScript = on
	return func() { oneScript = old }
}

// RedisCPU is redisCPU, for the benchmarks of package redis_test.
var RedisCPU = redisCPU
