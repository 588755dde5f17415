package chaos

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// figures collects one line per backend and primitive (TestChaos), printed
// at the end of the run.
var figures struct {
	mu    sync.Mutex
	lines []string
}

func addFigures(format string, args ...any) {
	figures.mu.Lock()
	defer figures.mu.Unlock()
	figures.lines = append(figures.lines, fmt.Sprintf(format, args...))
}

// TestMain writes the figures to $HOLDFAST_CHAOS_REPORT_FILE when it is set
// (make test-chaos prints it: go test shows a passing package's output only
// with -v), else to stdout; then it checks for leaked goroutines.
func TestMain(m *testing.M) {
	code := m.Run()
	figures.mu.Lock()
	var b strings.Builder
	if len(figures.lines) > 0 {
		b.WriteString("chaos figures per backend and primitive (faults: injected into the run the primitives share):\n")
		for _, l := range figures.lines {
			b.WriteString("  " + l + "\n")
		}
	}
	figures.mu.Unlock()
	if f := os.Getenv("HOLDFAST_CHAOS_REPORT_FILE"); f != "" {
		if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "chaos report:", err)
			code = 1
		}
	} else {
		fmt.Print(b.String())
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
