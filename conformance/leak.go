package conformance

import "go.uber.org/goleak"

// LeakOptions are the goleak options a test package that runs the suite
// needs: ginkgo's interrupt handler keeps one goroutine for the life of the
// process.
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(m, conformance.LeakOptions()...) }
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/onsi/ginkgo/v2/internal/interrupt_handler.(*InterruptHandler).registerForInterrupts.func2"),
	}
}
