package hlc_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The concurrency tests start goroutines; none may outlive the package's
// tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
