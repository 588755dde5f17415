package postgres

import (
	"context"

	"github.com/holdfast/holdfast/core/backend"
)

var _ backend.CountBackend = (*Backend)(nil)

// Count implements backend.CountBackend: the live mutex rows and grant rows,
// counted by the store in one statement (no row leaves it), so the server's
// held-locks gauge does not page every lock through the plugin.
func (b *Backend) Count(ctx context.Context) (int64, error) {
	ctx, done, err := b.call(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	var n int64
	err = b.pool.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM `+b.n.locks+` WHERE owner IS NOT NULL AND expires_at > clock_timestamp())
	+ (SELECT count(*) FROM `+b.n.grants+` WHERE expires_at > clock_timestamp())`).Scan(&n)
	if err != nil {
		return 0, b.wrap(ctx, "count", err)
	}
	return n, nil
}
