module github.com/holdfast/holdfast/server

go 1.26.0

require (
	github.com/holdfast/holdfast/core v0.0.0
	github.com/holdfast/holdfast/plugins/memory v0.0.0
	github.com/holdfast/holdfast/proto v0.0.0
)

replace (
	github.com/holdfast/holdfast/core => ../core
	github.com/holdfast/holdfast/plugins/memory => ../plugins/memory
	github.com/holdfast/holdfast/proto => ../proto
)
