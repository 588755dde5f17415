package redisconformance_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/holdfast/holdfast/conformance"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, conformance.LeakOptions()...)
}
