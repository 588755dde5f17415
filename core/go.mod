module github.com/holdfast/holdfast/core

go 1.26.0

require github.com/holdfast/holdfast/proto v0.0.0

require google.golang.org/protobuf v1.36.12 // indirect

replace github.com/holdfast/holdfast/proto => ../proto
