package harness

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// RequireServicesEnv names the variable that turns a missing service (etcd,
// Redis, PostgreSQL, a browser...) into a failure instead of a skip: `make
// test` sets it to 1, so that a broken environment cannot pass as skipped
// tests.
const RequireServicesEnv = "HOLDFAST_REQUIRE_SERVICES"

// ServicesRequired reports whether RequireServicesEnv is 1.
func ServicesRequired() bool { return os.Getenv(RequireServicesEnv) == "1" }

// Skipper is the part of testing.TB that SkipOrFail needs.
type Skipper interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// SkipOrFail skips the test with reason, or fails it when
// HOLDFAST_REQUIRE_SERVICES=1, where a missing service must not pass as a
// skip.
func SkipOrFail(t Skipper, reason string) {
	t.Helper()
	if ServicesRequired() {
		t.Fatalf("%s (and %s=1)", reason, RequireServicesEnv)
		return
	}
	t.Skipf("%s (set %s=1 to fail instead)", reason, RequireServicesEnv)
}

// OptionsFromEnv builds plugin options from environment variables: each
// entry of vars maps an option key to the variable holding its value, e.g.
// {"endpoints": "HOLDFAST_ETCD_ENDPOINTS"}. It returns an error naming the
// variables that are unset; callers pass it to SkipOrFail.
func OptionsFromEnv(vars map[string]string) (map[string]string, error) {
	opts := map[string]string{}
	var missing []string
	for k, v := range vars {
		val := os.Getenv(v)
		if val == "" {
			missing = append(missing, v)
			continue
		}
		opts[k] = val
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("environment variable(s) %s not set (start the service with scripts/<service>.sh start)", strings.Join(missing, ", "))
	}
	return opts, nil
}
