package holdfast

import "testing"

// StartTestServer runs `holdfast serve` with args for the package's external
// tests (readme_examples_test.go) and returns its host:port and a function
// that stops it (it is stopped at cleanup anyway).
func StartTestServer(t testing.TB, args ...string) (addr string, stop func()) {
	t.Helper()
	s := startServer(t, "127.0.0.1:0", args...)
	return s.addr, s.stop
}
