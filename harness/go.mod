module github.com/holdfast/holdfast/harness

go 1.26.0
