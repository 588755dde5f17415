// Command holdfast is the holdfast lock server: `holdfast serve`.
package main

import (
	"context"
	"os"

	"github.com/holdfast/holdfast/server/internal/cli"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	os.Exit(cli.Main(context.Background(), version, os.Args[1:], os.Stdout, os.Stderr))
}
