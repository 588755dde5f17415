package holdfast_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	holdfast "github.com/holdfast/holdfast/sdk-go"
)

// A nightly job that only one worker may run: take the lock, do the work
// under the guard's context, pass the fencing token to the resource.
func Example() {
	ctx := context.Background()
	client, err := holdfast.Dial("http://127.0.0.1:7410")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	g, err := client.Lock("jobs/nightly").TTL(10 * time.Second).Wait(30 * time.Second).Lock(ctx)
	if errors.Is(err, holdfast.ErrNotAcquired) {
		log.Print("another worker runs the nightly job")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := g.Unlock(context.Background()); errors.Is(err, holdfast.ErrLeaseLost) {
			log.Print("the lease was lost before the job finished; its writes were fenced")
		}
	}()

	token, err := g.FencingToken()
	if err != nil {
		log.Fatal(err)
	}
	work := g.Context() // cancelled if the lease is lost
	fmt.Println("running with fencing token", token, work.Err())
}

// TryLock makes one attempt and reports who holds the key.
func ExampleLock_TryLock() {
	client, err := holdfast.Dial("http://127.0.0.1:7410", holdfast.WithHolder("worker-3"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	g, err := client.Lock("reports/build").TTL(5 * time.Second).TryLock(context.Background())
	var busy *holdfast.NotAcquiredError
	switch {
	case errors.As(err, &busy) && busy.Current != nil:
		fmt.Println("held by", busy.Current.Holder)
		return
	case err != nil:
		log.Fatal(err)
	}
	defer func() {
		if err := g.Unlock(context.Background()); err != nil {
			log.Print(err) // the lease frees itself at its TTL
		}
	}()
	fmt.Println("acquired", g.Key())
}

// WithLock runs a function under the lock and reports a lease lost during it.
func ExampleWithLock() {
	client, err := holdfast.Dial("http://127.0.0.1:7410")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	err = holdfast.WithLock(context.Background(), client.Lock("migrations").TTL(30*time.Second),
		func(ctx context.Context) error {
			// Stop when ctx is cancelled: the lease is gone.
			return nil
		})
	if errors.Is(err, holdfast.ErrLeaseLost) {
		log.Print("migration overran its lease")
	}
}

// The watch signal: react to loss without polling.
func ExampleGuard_Context() {
	client, err := holdfast.Dial("http://127.0.0.1:7410")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	g, err := client.Lock("leader").TTL(6 * time.Second).Lock(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	<-g.Context().Done()
	if cause := context.Cause(g.Context()); errors.Is(cause, holdfast.ErrLeaseLost) {
		fmt.Println("no longer leader:", cause)
	}
}

// The resource side: refuse writes from a holder that lost the lock.
func ExampleFence() {
	var fence holdfast.Fence // kept with the resource's data
	write := func(token uint64, v string) error {
		if err := fence.Admit(token); err != nil {
			return err // errors.Is(err, holdfast.ErrStaleToken)
		}
		// ... apply v ...
		return nil
	}
	fmt.Println(write(34, "new holder"))
	fmt.Println(errors.Is(write(33, "paused old holder"), holdfast.ErrStaleToken))
	// Output:
	// <nil>
	// true
}

// ValidateWrite is the same check for a resource that keeps its own
// watermark.
func ExampleValidateWrite() {
	watermark := uint64(9) // the newest token the resource has accepted
	if _, err := holdfast.ValidateWrite(7, watermark); err != nil {
		fmt.Println(err)
	}
	watermark, err := holdfast.ValidateWrite(12, watermark) // store it with the write, atomically
	fmt.Println(watermark, err)
	// Output:
	// holdfast: stale fencing token 7: the resource has seen 9
	// 12 <nil>
}

// Watch the locks under a prefix until the context ends.
func ExampleClient_WatchPrefix() {
	client, err := holdfast.Dial("http://127.0.0.1:7410")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ev, err := range client.WatchPrefix(ctx, "jobs/") {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.Type, ev.State.Key, ev.State.Holder, ev.State.FencingToken)
	}
}

// List every held lock under a prefix, page by page behind the iterator.
func ExampleClient_List() {
	client, err := holdfast.Dial("http://127.0.0.1:7410")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	for st, err := range client.List(context.Background(), "jobs/") {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(st.Key, st.Holder, st.ExpiresAt)
	}
}
