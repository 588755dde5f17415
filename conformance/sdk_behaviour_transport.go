package conformance

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/holdfast/holdfast/conformance/sdkrunner"
	"github.com/holdfast/holdfast/harness"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// docs/sdk-behaviour.md, "Transport": TLS with a custom CA, a client
// certificate (mTLS), a bearer token and extra headers, each through the
// SDK's own option, against a server started with --tls-cert,
// --tls-client-ca and --auth-tokens.
var _ = describeSDK("behaviour table: transport", Label("sdk-behaviour", "transport", "backend-independent"), func(sc *SDKContext) {
	It("transport: TLS with a custom CA, a client certificate (mTLS) and a bearer token reach a server that requires all three; a missing token is unauthenticated, a key outside the token's prefixes permission_denied", Label("disruptive"), func(ctx SpecContext) {
		if !sc.CanStartServers() {
			Skip("the suite tests a server given by address; it needs to start one with TLS and tokens (use Config.Serve)")
		}
		dir := GinkgoT().TempDir()
		pki := harness.WriteMutualTLS(GinkgoT(), dir)
		const token = "conformance-bearer-token-0123456789"
		sum := sha256.Sum256([]byte(token))
		tokens := filepath.Join(dir, "tokens.yaml")
		Expect(os.WriteFile(tokens, fmt.Appendf(nil, "- name: conformance\n  sha256: %s\n  prefixes: [\"tls/\"]\n", hex.EncodeToString(sum[:])), 0o600)).To(Succeed())
		s, err := sc.StartServerWith(ctx, "--tls-cert", pki.ServerCertFile, "--tls-key", pki.ServerKeyFile, "--tls-client-ca", pki.CAFile, "--auth-tokens", tokens)
		Expect(err).NotTo(HaveOccurred())
		url := "https://" + s.Addr
		full := sdkrunner.ConnectArgs{Addr: url, CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile, BearerToken: token}

		c := sc.ConnectWith(ctx, sc.Adapter, full)
		l := c.MustLock(ctx, "tls/"+sc.Key("sdk-transport"), sc.LongTTL())
		Expect(c.Unlock(ctx, l.Guard)).To(Succeed())

		_, err = c.LockWith(ctx, sdkrunner.LockArgs{Key: "other/" + sc.Key("sdk-transport"), TTLMs: sc.LongTTL().Milliseconds(), Try: true})
		Expect(err).To(BeKind(sdkrunner.KindPermission), "a key outside the token's prefixes")
		Expect(err).To(HaveCode("permission_denied"))

		noToken := full
		noToken.BearerToken = ""
		c = sc.ConnectWith(ctx, sc.Adapter, noToken)
		_, err = c.LockWith(ctx, sdkrunner.LockArgs{Key: "tls/" + sc.Key("sdk-transport"), TTLMs: sc.LongTTL().Milliseconds(), Try: true})
		Expect(err).To(BeKind(sdkrunner.KindUnauthenticated), "no bearer token")
		Expect(err).To(HaveCode("unauthenticated"))

		// Without the client certificate the handshake fails: no answer
		// from the server at all.
		noCert := full
		noCert.CertFile, noCert.KeyFile, noCert.RetryBudgetMs = "", "", 300
		c = sc.ConnectWith(ctx, sc.Adapter, noCert)
		_, err = c.LockWith(ctx, sdkrunner.LockArgs{Key: "tls/" + sc.Key("sdk-transport"), TTLMs: sc.LongTTL().Milliseconds(), Try: true})
		Expect(err).To(HaveOccurred(), "a server requiring client certificates answered a client without one")
		Expect(s.Stop(0)).To(Succeed())
	}, SpecTimeout(time.Minute))

	It("transport: extra headers and the bearer token go with every request", func(ctx SpecContext) {
		p := sc.Proxy(sc.URL)
		c := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: p.URL, BearerToken: "header-check", Headers: map[string]string{"X-Holdfast-Conformance": "yes"}})
		l := c.MustLock(ctx, sc.Key("sdk-headers"), sc.LongTTL())
		Expect(c.Unlock(ctx, l.Guard)).To(Succeed())
		reqs := p.Requests("")
		Expect(reqs).NotTo(BeEmpty())
		for _, r := range reqs {
			Expect(r.Header.Get("X-Holdfast-Conformance")).To(Equal("yes"), "%s without the extra header", r.Method)
			Expect(r.Header.Get("Authorization")).To(Equal("Bearer header-check"), "%s without the bearer token", r.Method)
		}
	}, SpecTimeout(30*time.Second))
})
