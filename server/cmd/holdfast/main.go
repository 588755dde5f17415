// Command holdfast is the holdfast lock server: `holdfast serve`.
package main

import (
	"context"
	"os"

	"github.com/holdfast/holdfast/server/internal/cli"
	"github.com/holdfast/holdfast/server/internal/version"
)

func main() {
	os.Exit(cli.Main(context.Background(), version.String(), os.Args[1:], os.Stdout, os.Stderr))
}
