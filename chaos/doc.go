// Package chaos is holdfast's fault-injection harness: it runs many client
// processes against one or more `holdfast serve` processes for a bounded,
// seeded time while killing plugins and servers, pausing lock holders past
// their TTL (SIGSTOP), restarting the backend's own server and cutting
// clients off through a TCP proxy; it records every operation as a history
// and checks it with porcupine: lock keys against LockModel, a semaphore key
// against SemaphoreModel, a read-write lock key against RWLockModel and an
// election key against ElectionModel, each together with the writes its
// holders make at a resource (fenced by watermark for locks and by term for
// leaders; for the others, at most the limit's worth of holders writing at
// once); what the clients' Observe streams of the election key received is
// checked by CheckObservations.
//
// The run itself is a Go test (chaos_test.go); `make test-chaos` runs a short
// seeded run per backend, `make chaos DURATION=5m SEED=n` a longer one.
package chaos
