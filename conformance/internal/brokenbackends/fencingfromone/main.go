// Command fencingfromone is a deliberately broken holdfast backend for the conformance
// suite's own tests; see package brokenbackends.
package main

import "github.com/holdfast/holdfast/conformance/internal/brokenbackends"

func main() { brokenbackends.Serve(brokenbackends.FencingFromOne) }
