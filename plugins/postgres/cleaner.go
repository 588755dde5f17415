package postgres

import (
	"context"
	"log/slog"
	"time"
)

// scheduled tells the cleaner that this plugin stored a lock expiring after
// remaining; it wakes the cleaner when that is before its next look. During
// a round (whose query of the earliest expiry may have missed this lock) it
// is remembered for the round's schedule instead.
func (b *Backend) scheduled(remaining time.Duration) {
	at := time.Now().Add(remaining)
	b.mu.Lock()
	early := false
	switch {
	case b.awake:
		if b.pending.IsZero() || at.Before(b.pending) {
			b.pending = at
		}
	case at.Before(b.wakeAt):
		b.wakeAt = at
		early = true
	}
	b.mu.Unlock()
	if early {
		select {
		case b.poke <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// clean is the cleaner goroutine (see the package doc): mark expired rows
// free and delete expired grants (the triggers announce EventExpired), delete rows free for longer than
// idle_retention, then sleep until the earliest expiry.
func (b *Backend) clean() {
	defer b.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	var lastSweep time.Time
	sweepEvery := min(b.opts.IdleRetention/4, time.Minute)
	var failing error // the error of the last round, logged once per outage
	for {
		b.mu.Lock()
		b.awake, b.pending = true, time.Time{}
		b.mu.Unlock()

		wait, err := b.cleanOnce(&lastSweep, sweepEvery)
		switch {
		case err != nil && failing == nil && b.ctx.Err() == nil:
			slog.Warn("postgres cleaner: cannot reach the database; retrying", "error", err)
		case err == nil && failing != nil:
			slog.Info("postgres cleaner: database reachable again")
		}
		failing = err

		now := time.Now()
		next := now.Add(wait)
		b.mu.Lock()
		if !b.pending.IsZero() && b.pending.Before(next) {
			next = b.pending.Add(time.Millisecond) // a millisecond past, as cleanOnce does
		}
		b.awake, b.wakeAt = false, next
		b.mu.Unlock()
		timer.Reset(max(next.Sub(now), 0))
		select {
		case <-b.ctx.Done():
			return
		case <-b.poke:
		case <-timer.C:
		}
	}
}

// cleanOnce does one round and returns how long to sleep. Errors (the
// database is away) are retried after a short pause, bounded by the max sleep.
func (b *Backend) cleanOnce(lastSweep *time.Time, sweepEvery time.Duration) (time.Duration, error) {
	maxSleep := b.opts.CleanerMaxSleep
	retry := min(100*time.Millisecond, maxSleep)
	ctx, cancel := context.WithTimeout(b.ctx, b.opts.CallTimeout)
	defer cancel()

	tag, err := b.pool.Exec(ctx, b.sql.expire)
	if err != nil {
		return retry, err
	}
	gtag, err := b.pool.Exec(ctx, b.grants.expire)
	if err != nil {
		return retry, err
	}
	if tag.RowsAffected() >= expireBatch || gtag.RowsAffected() >= expireBatch {
		return 0, nil // more to do: go again at once
	}
	if time.Since(*lastSweep) >= sweepEvery {
		tag, err := b.pool.Exec(ctx, b.sql.deleteIdle, micros(b.opts.IdleRetention))
		if err != nil {
			return retry, err
		}
		if tag.RowsAffected() < deleteBatch {
			*lastSweep = time.Now()
		}
	}
	var next *int64
	if err := b.pool.QueryRow(ctx, b.sql.nextExpiry).Scan(&next); err != nil {
		return retry, err
	}
	if next == nil {
		return maxSleep, nil
	}
	// A millisecond past the expiry, so the row is expired when we look.
	return min(max(time.Duration(*next)*time.Microsecond+time.Millisecond, 0), maxSleep), nil
}
