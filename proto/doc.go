// Package proto holds holdfast's protobuf sources and the Go code generated
// from them: holdfast/lock/v1 is the public LockService API, and
// holdfast/backend/v1 is the protocol between the engine and backend plugins.
// The hand-written Hybrid Logical Clock that the engine and the Go SDK share
// lives in the hlc subpackage.
//
// Regenerate with `make generate`; never edit the *.pb.go files by hand.
package proto
