module github.com/holdfast/holdfast/conformance

go 1.26.7
