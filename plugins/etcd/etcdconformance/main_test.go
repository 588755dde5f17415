package etcdconformance_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/holdfast/holdfast/conformance"
	"github.com/holdfast/holdfast/plugins/etcd/internal/etcdtest"
)

// endpoints is the etcd the suite runs on; startErr says why there is none.
var (
	endpoints string
	startErr  error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var stop func()
	endpoints, stop, startErr = etcdtest.StartShared()
	code := m.Run()
	stop()
	if code == 0 {
		if err := goleak.Find(conformance.LeakOptions()...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}
