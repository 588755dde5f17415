// Package enginetest holds the tests of core/engine, which run the engine on
// the real memory backend. They live in the memory plugin's module, not in
// core, because core must not require plugins/memory: the memory module
// requires core, and a module cycle would put a plugin in the module graph
// of everyone who imports core/backend. The package has no code of its own.
//
// Run them with: cd plugins/memory && go test -race ./enginetest
package enginetest
