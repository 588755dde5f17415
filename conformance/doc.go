// Package conformance is holdfast's shared conformance suite: the promises of
// docs/promises.md (numbered 1 to 8 there and in the specs), and the SDK
// behaviour table of docs/sdk-behaviour.md, written once as ginkgo specs and
// checked against every backend, every server and every SDK.
//
// It has three levels:
//
//   - Backend level: drives a backend plugin executable through the same
//     plugin host the server uses (go-plugin, gRPC, a real subprocess) and
//     checks atomic acquire, owner-token compare, TTL, fencing (including a
//     kill -9 of the plugin), stamps, Watch, List and Get.
//   - Service level: drives a running holdfast server through its public API
//     (the Go SDK, and the generated Connect client where the SDK has no
//     word for it) and checks promises 1 to 8 end to end.
//   - SDK level: drives an SDK in any language through its adapter process
//     (JSON lines over stdin/stdout, package sdkrunner and its PROTOCOL.md)
//     against servers the suite starts, and checks the SDK's TTL, owner
//     token, watchdog and poisoning, fencing, HLC and waiting behaviour.
//
// One Config describes a run. A Go test fills it and calls RunBackend or
// RunService; the holdfast-conformance command fills it from flags:
//
//	func TestMyBackend(t *testing.T) {
//		conformance.RunBackend(t, conformance.Config{
//			Plugin:        "./bin/holdfast-backend-mine",
//			PluginOptions: map[string]string{"dsn": os.Getenv("MY_DSN")},
//		})
//	}
//
// Every spec carries the label of its promise (atomic-acquire, owner-token,
// ttl, fencing, stamps, watch, follow, list, get, sharing, durable,
// watchdog, waiting, fair, server-info, bad-input, store-restart) and of its level
// (backend, service); specs that kill, pause or restart a process also carry
// "disruptive". Select them with Config.LabelFilter, -ginkgo.label-filter or
// the command's --label-filter. A spec that does not apply to what the
// backend declares (Info.Shared, Info.Durable, Info.Fair, TTL bounds) is
// skipped with the reason in the report. Config.RestartStore lets the suite
// restart a backend's store (KillPlugin, for a store in the plugin process);
// Config.SingleInstance says the store allows one owner at a time.
//
// Ginkgo runs one suite per process. RunBackend and RunService therefore run
// the suite in a child process (the test binary itself, re-executed for just
// the calling test), so one test binary can run many configurations.
package conformance
