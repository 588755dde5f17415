module github.com/holdfast/holdfast/conformance

go 1.26.0

require (
	github.com/holdfast/holdfast/core v0.0.0
	github.com/holdfast/holdfast/proto v0.0.0
	github.com/holdfast/holdfast/sdk-go v0.0.0
)

replace (
	github.com/holdfast/holdfast/core => ../core
	github.com/holdfast/holdfast/proto => ../proto
	github.com/holdfast/holdfast/sdk-go => ../sdk-go
)
