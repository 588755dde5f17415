module github.com/holdfast/holdfast/plugins/memory

go 1.26.7
