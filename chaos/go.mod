module github.com/holdfast/holdfast/chaos

go 1.26.0

replace (
	github.com/holdfast/holdfast/harness => ../harness
	github.com/holdfast/holdfast/proto => ../proto
	github.com/holdfast/holdfast/sdk-go => ../sdk-go
)

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/holdfast/holdfast/harness v0.0.0
	github.com/holdfast/holdfast/sdk-go v0.0.0
	go.uber.org/goleak v1.3.0
)

require (
	connectrpc.com/connect v1.21.1 // indirect
	github.com/holdfast/holdfast/proto v0.0.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
