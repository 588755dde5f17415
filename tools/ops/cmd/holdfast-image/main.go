// Command holdfast-image builds holdfast's container image for one
// platform into an OCI archive (package ociimage), from binaries built
// beforehand: make dist-oci runs it.
//
//	holdfast-image -platform linux/amd64 -version 0.1.0 -revision $(git rev-parse HEAD) \
//	    -out dist/oci/holdfast-0.1.0-linux-amd64.oci.tar BIN/holdfast BIN/holdfast-backend-etcd ...
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/holdfast/holdfast/tools/ops/ociimage"
)

func main() {
	var (
		out      = flag.String("out", "", "OCI archive to write")
		platform = flag.String("platform", "linux/amd64", "os/arch[/variant] of the binaries")
		version  = flag.String("version", "", "release version (VERSION)")
		revision = flag.String("revision", "", "source commit")
		source   = flag.String("source", "https://github.com/holdfast/holdfast", "project URL")
		name     = flag.String("name", "holdfast", "image name; the archive names the image NAME:VERSION")
		caCerts  = flag.String("ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle for the image's /etc/ssl/certs/ca-certificates.crt (empty: none)")
	)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: holdfast-image -out FILE -version V [flags] BINARY...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*out, *platform, *version, *revision, *source, *name, *caCerts, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "holdfast-image:", err)
		os.Exit(1)
	}
}

func run(out, platform, version, revision, source, name, caCerts string, binaries []string) error {
	if out == "" || version == "" || len(binaries) == 0 {
		flag.Usage()
		return fmt.Errorf("-out, -version and binaries are required")
	}
	p, err := v1.ParsePlatform(platform)
	if err != nil {
		return err
	}
	created, err := sourceDate()
	if err != nil {
		return err
	}
	spec := ociimage.Spec{Platform: *p, Version: version, Revision: revision, Created: created,
		Source: source, Binaries: binaries, CACertificates: caCerts}
	img, err := ociimage.Build(spec)
	if err != nil {
		return err
	}
	if err := ociimage.WriteArchive(out, img, *p, name+":"+version, created); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s:%s %s %s\n", out, name, version, platform, digest)
	return nil
}

// sourceDate is $SOURCE_DATE_EPOCH (reproducible builds), else now.
func sourceDate() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Now().UTC().Truncate(time.Second), nil
	}
	sec, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", v, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}
