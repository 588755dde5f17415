package conformance_test

import (
	"testing"

	"github.com/holdfast/holdfast/conformance"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, conformance.LeakOptions()...)
}
