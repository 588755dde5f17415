package holdfast

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind (every guard's
// watchdog has one exit) and removes the server binary it built.
func TestMain(m *testing.M) {
	code := m.Run()
	removeBuild()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
