package main

import (
	"context"
	"errors"
	"time"
)

// sdkRenewers holds locks with the Go SDK (not wired yet).
func sdkRenewers(context.Context, string, int, time.Duration, *renewalStats) (func(context.Context, int, string) (func(), error), func(), error) {
	return nil, nil, errors.New("the Go SDK mode is not wired yet")
}
