package chaos

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// echoServer answers each line with prefix+line.
func echoServer(t *testing.T, prefix string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := io.WriteString(c, prefix+sc.Text()+"\n"); err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, msg string, within time.Duration) (string, error) {
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(within))
	return r.ReadString('\n')
}

func TestProxyBlackholeDropRetarget(t *testing.T) {
	a, b := echoServer(t, "a:"), echoServer(t, "b:")
	p, err := StartProxy(a)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "1", 5*time.Second); err != nil || got != "a:1\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Blackhole()
	// Nothing may come back while blackholed: the read must hit its deadline.
	if got, err := roundTrip(c, r, "2", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackholed proxy answered %q, %v", got, err)
	}
	p.Heal()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "a:2\n" {
		t.Fatalf("after heal: %q, %v", got, err)
	}
	p.Retarget(b) // drops c
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("connection survived a retarget")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := roundTrip(c2, bufio.NewReader(c2), "3", 5*time.Second); err != nil || got != "b:3\n" {
		t.Fatalf("after retarget: %q, %v", got, err)
	}
}

func TestResourceFence(t *testing.T) {
	r, err := StartResource()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	steps := []struct {
		fence uint64
		ok    bool
	}{{5, true}, {5, true}, {7, true}, {6, false}, {7, true}, {8, true}, {5, false}}
	for _, s := range steps {
		if got := r.Write(WriteRequest{Key: "k", Fence: s.fence}); got.Accepted != s.ok {
			t.Fatalf("write %d: accepted=%t, want %t", s.fence, got.Accepted, s.ok)
		}
	}
	if got := r.Write(WriteRequest{Key: "other", Fence: 1}); !got.Accepted {
		t.Fatal("watermarks are per key")
	}
	if n := len(r.Ops()); n != len(steps)+1 {
		t.Fatalf("%d ops recorded, want %d", n, len(steps)+1)
	}
}
