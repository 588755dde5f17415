module github.com/holdfast/holdfast/sdk-go

go 1.26.7
