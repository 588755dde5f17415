module github.com/holdfast/holdfast/chaos

go 1.26.0

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/holdfast/holdfast/harness v0.1.0
	github.com/holdfast/holdfast/sdk-go v0.1.0
	go.uber.org/goleak v1.3.0
)

require (
	connectrpc.com/connect v1.21.1 // indirect
	github.com/holdfast/holdfast/proto v0.1.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
