package redis

// ClusterSlot is clusterSlot, for the Cluster test to compare with Redis.
var ClusterSlot = clusterSlot
