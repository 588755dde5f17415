// Command holdfast-release is the release machinery of the holdfast
// repository: one version (the VERSION file) for every Go module and
// package, and the Go module proxy that `make dist` writes.
//
//	holdfast-release set-version [VERSION]   write VERSION (if given) and rewrite every go.mod's sibling requires, the version constants and the SDK manifests to it
//	holdfast-release check                   fail when anything disagrees with VERSION (what set-version writes)
//	holdfast-release goproxy -out DIR        write a file-system module proxy (GOPROXY=file://DIR) holding every shipped module at VERSION
//	holdfast-release tags                    print the git tag of every shipped module at VERSION (core/v0.1.0, …)
//	holdfast-release standalone DIR -- CMD…  run CMD in module DIR with GOWORK=off, siblings taken from this checkout
//	holdfast-release tidy DIR                `go mod tidy` module DIR with GOWORK=off, siblings taken from this checkout
//
// The released go.mod files require their siblings at the release version
// and carry no replace directives, so a tag of the tree is installable as
// it is (`go install …@vX.Y.Z` refuses replace directives). Development uses
// go.work. Checks that must see one module's go.mod alone (GOWORK=off) get
// the siblings from the checkout through a temporary copy of go.mod with
// replace lines (go's -modfile flag), never through the committed file.
//
// Run it from anywhere inside the repository; it finds the root by go.work.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `usage:
  holdfast-release set-version [VERSION]
  holdfast-release check
  holdfast-release goproxy -out DIR
  holdfast-release tags
  holdfast-release standalone MODULE_DIR -- CMD [ARGS...]
  holdfast-release tidy MODULE_DIR
`

// errUsage marks a command line that cannot be run (exit status 2).
var errUsage = errors.New("bad usage")

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	err := dispatch(args[0], args[1:], stdout, stderr)
	var exit *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.code
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "holdfast-release: %v\n%s", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "holdfast-release: %v\n", err)
		return 1
	}
}

func dispatch(cmd string, args []string, stdout, stderr io.Writer) error {
	r, err := openRepo(".")
	if err != nil {
		return err
	}
	switch cmd {
	case "set-version":
		if len(args) > 1 {
			return fmt.Errorf("%w: set-version takes at most one VERSION", errUsage)
		}
		version := r.Version
		if len(args) == 1 {
			version = args[0]
		}
		return setVersion(r, version, stdout)
	case "check":
		if len(args) != 0 {
			return fmt.Errorf("%w: check takes no arguments", errUsage)
		}
		if err := errors.Join(checkRelease(r)...); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "release %s: every module, constant and SDK manifest agrees\n", r.Version)
		return nil
	case "goproxy":
		fs := flag.NewFlagSet("goproxy", flag.ContinueOnError)
		fs.SetOutput(stderr)
		out := fs.String("out", "", "directory to write the proxy into (emptied first)")
		if err := fs.Parse(args); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if *out == "" || fs.NArg() != 0 {
			return fmt.Errorf("%w: goproxy needs -out DIR and nothing else", errUsage)
		}
		return writeGoProxy(r, *out, stdout)
	case "tags":
		if len(args) != 0 {
			return fmt.Errorf("%w: tags takes no arguments", errUsage)
		}
		for _, m := range r.Modules {
			if m.Shipped {
				fmt.Fprintln(stdout, moduleTag(m, r.GoVersion()))
			}
		}
		return nil
	case "standalone":
		if len(args) < 3 || args[1] != "--" {
			return fmt.Errorf("%w: standalone MODULE_DIR -- CMD [ARGS...]", errUsage)
		}
		return standalone(r, args[0], args[2:], stdout, stderr)
	case "tidy":
		if len(args) != 1 {
			return fmt.Errorf("%w: tidy MODULE_DIR", errUsage)
		}
		return tidy(r, args[0], stdout, stderr)
	default:
		return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
}

// exitError carries a child command's exit status through to ours.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
