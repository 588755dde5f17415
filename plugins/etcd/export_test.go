package etcd

// BatchRefused is how many batch transactions etcd refused as too large
// (their items then went their single paths).
func (b *Backend) BatchRefused() int64 { return b.batchRefused.Load() }
