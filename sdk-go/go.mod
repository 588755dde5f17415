module github.com/holdfast/holdfast/sdk-go

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/holdfast/holdfast/harness v0.1.0
	github.com/holdfast/holdfast/proto v0.1.0
	google.golang.org/protobuf v1.36.12
)

require go.uber.org/goleak v1.3.0
