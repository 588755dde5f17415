// Package harness is holdfast's test infrastructure, in one place and with
// nothing but the standard library, so that every suite that drives real
// binaries (the conformance suite, the SDK tests, the server's end-to-end
// tests, the plugins' multi-server tests, chaos, bench) uses the same
// copy:
//
//   - Binary and Build find or build the repository's executables
//     ($HOLDFAST_BIN_DIR first);
//   - Start and StartT run `holdfast serve` (or any program that speaks the
//     readiness protocol) on a free loopback port, wait for its readiness
//     line, and stop it by its PID;
//   - Tail keeps the last bytes a process wrote, for error messages;
//   - SkipOrFail and OptionsFromEnv are the one place that reads
//     HOLDFAST_REQUIRE_SERVICES: a test whose service is missing skips,
//     or fails under `make test`;
//   - NewCA issues throw-away certificates for TLS tests;
//   - FencedResource judges safety where it matters, at the resource a
//     lock protects; RacePermits judges a store's semaphore permits among
//     racers.
//
// The readiness protocol is one line on the server's stdout, printed once
// it serves; all its logs go to stderr:
//
//	holdfast serving addr=127.0.0.1:PORT backend=NAME shared=BOOL durable=BOOL
package harness
