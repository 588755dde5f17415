// Package abuse holds holdfast's tests against hostile and careless
// clients: each test starts the real `holdfast serve` (and its plugin
// process) on loopback, runs one bounded attack from outside (forged page
// tokens, lock and waiter floods, slow request bodies and headers, idle
// connections, watchers that stop reading, a frozen plugin, malformed
// frames, control characters in keys, failed TLS handshakes), and checks
// two things: the server refuses or ends the abuse the way the README's
// Security section says, and a normal client is not starved.
//
// "Not starved" is a ratio, not a time: a normal client measures the p50 of
// its own Acquire while the server is idle and again during the attack, in
// the same test, on the same connection, and the test fails when the
// second is more than a stated multiple of the first. A loaded machine
// slows both measurements alike; a regression (a server-wide lock held for
// a full scan, fan-out on the acquire path, a slow client holding a
// connection slot) multiplies the second by tens or hundreds.
//
// Every attack is bounded in count and time, targets 127.0.0.1 (and other
// 127/8 source addresses, to stand for other clients) only, and every
// server is stopped by its PID at the end of its test. `make test-abuse`
// runs them; at the end the tests print one line per attack with both
// p50s.
//
// HOLDFAST_ABUSE_BASELINE=1 runs the same attacks against a binary that
// predates these protections (HOLDFAST_BIN_DIR pointing at it): servers
// start without the new flags and tokens-file fields, and a missing refusal
// is logged instead of failing, so that the before and after latencies are
// measured the same way.
package abuse
