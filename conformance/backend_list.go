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

		// Pages of 3 (the last one short), of 1, and one page of exactly
		// every key, which must say it is the last.
		for _, size := range []int{3, 1, len(want)} {
			var got []string
			token := ""
			for pages := 0; ; pages++ {
				Expect(pages).To(BeNumerically("<=", len(want)), "List never returned an empty next_page_token (pages of %d)", size)
				page, err := sc.Backend.List(ctx, backend.ListRequest{Prefix: prefix, PageSize: size, PageToken: token})
				Expect(err).NotTo(HaveOccurred(), "List, pages of %d", size)
				Expect(len(page.Records)).To(BeNumerically("<=", size), "page larger than page size %d", size)
				for _, r := range page.Records {
					got = append(got, r.Key)
					Expect(r.FencingToken).To(Equal(tokens[r.Key]), "fencing token of %q", r.Key)
					Expect(r.Holder).To(Equal("conformance"))
				}
				if page.NextPageToken == "" {
					break
				}
				Expect(len(got)).To(BeNumerically("<", len(want)), "a page of %d ended with every key listed, yet gave a next_page_token", size)
				token = page.NextPageToken
			}
			Expect(got).To(Equal(want), "List under %q, pages of %d", prefix, size)
		}
	}, SpecTimeout(30*time.Second))
})
