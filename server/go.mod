module github.com/holdfast/holdfast/server

go 1.26.7
