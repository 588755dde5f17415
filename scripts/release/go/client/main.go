// Command client is what a service team writes after
// `go get github.com/holdfast/holdfast/sdk-go@vX.Y.Z` in a module of its
// own: take a lock, use its fencing token, see that a second taker is
// refused, unlock. scripts/release/test-go.sh builds it in a fresh module
// outside the repository against the released SDK (dist/goproxy).
//
//	client http://127.0.0.1:7410
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	holdfast "github.com/holdfast/holdfast/sdk-go"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: client SERVER_URL")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
}

func run(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := holdfast.Dial(addr)
	if err != nil {
		return err
	}
	defer client.Close()

	const key = "release-test/sdk-go"
	g, err := client.Lock(key).TTL(10 * time.Second).Wait(10 * time.Second).Lock(ctx)
	if err != nil {
		return fmt.Errorf("lock %s: %w", key, err)
	}
	token, err := g.FencingToken()
	if err != nil {
		return err
	}
	if _, err := client.Lock(key).TryLock(ctx); !errors.Is(err, holdfast.ErrNotAcquired) {
		return fmt.Errorf("a second TryLock of the held %s answered %v, want ErrNotAcquired", key, err)
	}
	if err := g.Unlock(ctx); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	info, err := client.ServerInfo(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("sdk-go: locked %s (fencing token %d), a second taker was refused, unlocked; server %s\n", key, token, info.Version)
	return nil
}
