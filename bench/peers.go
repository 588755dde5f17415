package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// The direct clients holdfast is measured against, doing the same work
// without holdfast in between.

// lockPair takes one worker's lock and returns the call that gives it back,
// so that one peer can be timed back to back (backToBack) or with a pause
// before each of its two calls (paced, in paced.go).
type lockPair func(ctx context.Context, worker int) (unlock func(context.Context) error, err error)

// backToBack is a lockPair's lock and unlock one right after the other,
// timed together: the peer as its users run it.
func backToBack(p lockPair) op {
	return func(ctx context.Context, worker, _ int) error {
		unlock, err := p(ctx, worker)
		if err != nil {
			return err
		}
		return unlock(ctx)
	}
}

func dialEtcd(endpoints string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(endpoints, ","),
		DialTimeout: 5 * time.Second,
	})
}

// etcdMutexNewSession is concurrency.Mutex with a new session (its own lease)
// per lock: the like-for-like work, since each holdfast lock has its own lease.
func etcdMutexNewSession(cli *clientv3.Client, prefix string) op {
	return func(ctx context.Context, worker, _ int) error {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(10), concurrency.WithContext(ctx))
		if err != nil {
			return err
		}
		defer s.Close()
		m := concurrency.NewMutex(s, fmt.Sprintf("%s/%d", prefix, worker))
		if err := m.Lock(ctx); err != nil {
			return err
		}
		return m.Unlock(ctx)
	}
}

// etcdMutexReusedSession keeps one session per worker.
func etcdMutexReusedSession(ctx context.Context, cli *clientv3.Client, prefix string, workers int) (lockPair, func(), error) {
	sessions := make([]*concurrency.Session, workers)
	closeAll := func() {
		for _, s := range sessions {
			if s != nil {
				s.Close()
			}
		}
	}
	for i := range sessions {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(10), concurrency.WithContext(ctx))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		sessions[i] = s
	}
	return func(ctx context.Context, worker int) (func(context.Context) error, error) {
		m := concurrency.NewMutex(sessions[worker], fmt.Sprintf("%s/%d", prefix, worker))
		if err := m.Lock(ctx); err != nil {
			return nil, err
		}
		return m.Unlock, nil
	}, closeAll, nil
}

// etcdHotLocker is one hot-key worker on concurrency.Mutex with its own
// session.
type etcdHotLocker struct {
	m *concurrency.Mutex
}

func (l *etcdHotLocker) lock(ctx context.Context) error   { return l.m.Lock(ctx) }
func (l *etcdHotLocker) unlock(ctx context.Context) error { return l.m.Unlock(ctx) }

// redisPoolSize is the Redis connection pool of both the redislock peer and
// holdfast's Redis plugin.
const redisPoolSize = 64

func newRedis(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: redisPoolSize})
}

// redislockObtainRelease is bsm/redislock's Obtain then Release.
func redislockObtainRelease(rdb *redis.Client, prefix string) lockPair {
	locker := redislock.New(rdb)
	return func(ctx context.Context, worker int) (func(context.Context) error, error) {
		l, err := locker.Obtain(ctx, fmt.Sprintf("%s/%d", prefix, worker), 10*time.Second, nil)
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
}

// redislockHotLocker polls every 100 ms, redislock's documented way to wait.
type redislockHotLocker struct {
	locker *redislock.Client
	key    string
	held   *redislock.Lock
}

func (l *redislockHotLocker) lock(ctx context.Context) error {
	lk, err := l.locker.Obtain(ctx, l.key, 10*time.Second, &redislock.Options{
		RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond),
	})
	if err != nil {
		return err
	}
	l.held = lk
	return nil
}

func (l *redislockHotLocker) unlock(ctx context.Context) error { return l.held.Release(ctx) }

// pgAdvisory is pg_try_advisory_lock then pg_advisory_unlock on one pooled
// connection per operation (session-level advisory locks belong to a
// connection, which is held from the lock to the unlock).
func pgAdvisory(pool *pgxpool.Pool) lockPair {
	return func(ctx context.Context, worker int) (func(context.Context) error, error) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		id := int64(1_000_000 + worker)
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil {
			conn.Release()
			return nil, err
		}
		if !ok {
			conn.Release()
			return nil, errors.New("advisory lock not acquired")
		}
		return func(ctx context.Context) error {
			defer conn.Release()
			return conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok)
		}, nil
	}
}
