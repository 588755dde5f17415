// Package opstest tests what operators install, as they install it: the
// container image (its OCI archive, and running it under podman), the
// Debian package (dpkg -i on this machine, the packaged binary with the
// packaged config, dpkg --purge), the Kubernetes manifests (kustomize
// build, validated against Kubernetes' own schemas by kubectl-validate) and
// the Prometheus alert rules (promtool). make test-ops builds the artifacts
// first and runs these tests.
package opstest
