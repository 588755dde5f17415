package conformance

import (
	"time"

	"github.com/onsi/ginkgo/v2"
)

// Specs register themselves here at package initialisation, as csi-test's
// do, and are turned into ginkgo containers only when a run starts, with the
// run's context injected. Importing the package therefore adds nothing to a
// caller's own ginkgo suite.

type backendSpec struct {
	text   string
	labels ginkgo.Labels
	body   func(sc *BackendContext)
}

type serviceSpec struct {
	text   string
	labels ginkgo.Labels
	body   func(sc *ServiceContext)
}

var (
	backendSpecs []backendSpec
	serviceSpecs []serviceSpec
)

// describeBackend registers a container of backend-level specs.
func describeBackend(text string, labels ginkgo.Labels, body func(sc *BackendContext)) bool {
	backendSpecs = append(backendSpecs, backendSpec{text, labels, body})
	return true
}

// describeService registers a container of service-level specs.
func describeService(text string, labels ginkgo.Labels, body func(sc *ServiceContext)) bool {
	serviceSpecs = append(serviceSpecs, serviceSpec{text, labels, body})
	return true
}

func registerBackend(sc *BackendContext) {
	ginkgo.BeforeSuite(sc.setup, ginkgo.NodeTimeout(3*time.Minute))
	ginkgo.AfterSuite(sc.teardown)
	for _, s := range backendSpecs {
		ginkgo.Describe(s.text, s.labels, func() { s.body(sc) })
	}
}

func registerService(sc *ServiceContext) {
	ginkgo.BeforeSuite(sc.setup, ginkgo.NodeTimeout(3*time.Minute))
	ginkgo.AfterSuite(sc.teardown)
	for _, s := range serviceSpecs {
		ginkgo.Describe(s.text, s.labels, func() { s.body(sc) })
	}
}
