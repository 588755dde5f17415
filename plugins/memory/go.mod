module github.com/holdfast/holdfast/plugins/memory

go 1.26.0

require (
	github.com/holdfast/holdfast/core v0.0.0
	github.com/holdfast/holdfast/proto v0.0.0
)

require (
	go.uber.org/goleak v1.3.0
	google.golang.org/protobuf v1.36.12 // indirect
)

replace (
	github.com/holdfast/holdfast/core => ../../core
	github.com/holdfast/holdfast/proto => ../../proto
)
