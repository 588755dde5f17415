module github.com/holdfast/holdfast/sdk-go

go 1.26.0

require github.com/holdfast/holdfast/proto v0.0.0

replace github.com/holdfast/holdfast/proto => ../proto
