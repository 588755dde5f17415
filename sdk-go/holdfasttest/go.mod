module github.com/holdfast/holdfast/sdk-go/holdfasttest

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/holdfast/holdfast/core v0.1.0
	github.com/holdfast/holdfast/plugins/memory v0.1.0
	github.com/holdfast/holdfast/sdk-go v0.1.0
	github.com/holdfast/holdfast/server v0.1.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/google/btree v1.1.3 // indirect
	github.com/holdfast/holdfast/proto v0.1.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
