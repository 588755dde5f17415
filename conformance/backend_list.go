package conformance

import (
	"time"

	"slices"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = describeBackend("list", Label("list"), func(sc *BackendContext) {
	It("pages through held locks under a prefix in key order", func(ctx SpecContext) {
		// The prefix holds the characters that SQL LIKE (_ %) and globs
		// (* ? [ ]) give a meaning: a prefix is a string, not a pattern.
		// Each outside key starts with the prefix read as one of them.
		base := sc.Key("")
		prefix := base + "l_%*?[a]/"
		for _, outside := range []string{
			base + "l_%*?[a]-outside", // a sibling
			base + "lz%*?[a]/k",       // LIKE 'l_%*?[a]/%'
			base + "l_%zza/k",         // glob l_%*?[a]/*
		} {
			sc.MustAcquire(ctx, outside, sc.LongTTL())
		}
		var want []string
		tokens := map[string]uint64{}
		for _, k := range []string{"g", "c", "a", "e", "b", "f", "d"} {
			key := prefix + k
			_, rec := sc.MustAcquire(ctx, key, sc.LongTTL())
			want = append(want, key)
			tokens[key] = rec.FencingToken
		}
		// One released key must not be listed.
		gone := prefix + "released"
		req, _ := sc.MustAcquire(ctx, gone, sc.LongTTL())
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: gone, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		slices.Sort(want)

		var got []string
		token := ""
		for pages := 0; ; pages++ {
			Expect(pages).To(BeNumerically("<", 10), "List never returned an empty next_page_token")
			page, err := sc.Backend.List(ctx, backend.ListRequest{Prefix: prefix, PageSize: 3, PageToken: token})
			Expect(err).NotTo(HaveOccurred())
			Expect(len(page.Records)).To(BeNumerically("<=", 3), "page larger than page size")
			for _, r := range page.Records {
				got = append(got, r.Key)
				Expect(r.FencingToken).To(Equal(tokens[r.Key]), "fencing token of %q", r.Key)
				Expect(r.Holder).To(Equal("conformance"))
			}
			if page.NextPageToken == "" {
				break
			}
			token = page.NextPageToken
		}
		Expect(got).To(Equal(want), "List under %q, pages of 3", prefix)
	}, SpecTimeout(30*time.Second))
})
