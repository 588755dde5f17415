// Transport options of createClient (docs/sdk-behaviour.md, "Transport"):
// bearer token, TLS with a custom CA, client certificates (mTLS), headers,
// interceptors. Each against a holdfast server of the test's own, started
// with the flags the option needs.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { Interceptor } from "@connectrpc/connect";
import {
  HoldfastError,
  InvalidArgumentError,
  PermissionDeniedError,
  UnauthenticatedError,
  createClient,
} from "../src/node.js";
import { startServer, type TestServer } from "../src/testing.js";
import { holdfastBin, key, makeCerts, needsBinary, read, recordingLogger, type Certs } from "./helpers.js";

const quiet = { logger: recordingLogger() };

describe("transport options", { skip: needsBinary }, () => {
  let certs: Certs;
  before(() => {
    certs = makeCerts();
  });
  after(() => { certs?.remove(); });

  describe("bearer token", () => {
    let server: TestServer;
    const token = randomBytes(24).toString("base64url");
    const billingToken = randomBytes(24).toString("base64url");
    before(async () => {
      const file = join(certs.dir, "tokens.json");
      const sha = (t: string) => createHash("sha256").update(t).digest("hex");
      writeFileSync(
        file,
        JSON.stringify([
          { name: "everything", sha256: sha(token), prefixes: [""] },
          { name: "billing", sha256: sha(billingToken), prefixes: ["billing/"] },
        ]),
      );
      server = await startServer({ bin: holdfastBin, args: ["--auth-tokens", file] });
    });
    after(() => server?.stop());

    it("a call without a token answers unauthenticated", async () => {
      const c = createClient(server.address, quiet);
      await assert.rejects(c.lock(key("no-token")).tryAcquire(), (e: unknown) => e instanceof UnauthenticatedError && e.code === "unauthenticated");
      await c.close();
    });

    it("bearerToken is sent as Authorization: Bearer, as a string or from a function", async () => {
      for (const bearerToken of [token, () => Promise.resolve(token)]) {
        const c = createClient(server.address, { ...quiet, bearerToken });
        const g = await c.lock(key("token")).ttl("5s").acquire();
        await g.unlock();
        await c.close();
      }
    });

    it("a token outside its namespace answers permission_denied", async () => {
      const c = createClient(server.address, { ...quiet, bearerToken: billingToken });
      const g = await c.lock(`billing/${key("ns")}`).ttl("5s").acquire();
      await g.unlock();
      await assert.rejects(c.lock(key("elsewhere")).tryAcquire(), (e: unknown) => e instanceof PermissionDeniedError && e.code === "permission_denied");
      await c.close();
    });

    it("an empty token is refused by createClient", () => {
      assert.throws(() => createClient(server.address, { bearerToken: "" }), InvalidArgumentError);
    });
  });

  describe("TLS with a custom CA", () => {
    let server: TestServer;
    before(async () => {
      server = await startServer({ bin: holdfastBin, args: ["--tls-cert", certs.serverCert, "--tls-key", certs.serverKey] });
    });
    after(() => server?.stop());

    it("the address is https:// and every protocol works with the CA", async () => {
      assert.match(server.address, /^https:\/\/127\.0\.0\.1:\d+$/);
      for (const protocol of ["connect", "grpc", "grpc-web"] as const) {
        const c = createClient(server.address, { ...quiet, protocol, tls: { ca: read(certs.caCert) } });
        const g = await c.lock(key(`tls-${protocol}`)).ttl("5s").acquire();
        await g.unlock();
        await c.close();
      }
    });

    it("without the CA the server's certificate is not trusted", async () => {
      const c = createClient(server.address, { ...quiet, retryBudget: "300ms" });
      await assert.rejects(c.lock(key("tls-untrusted")).tryAcquire(), (e: unknown) => e instanceof HoldfastError && /certificate/i.test(e.cause instanceof Error ? e.cause.message : e.message));
      await c.close();
    });

    it("tls options for an http:// address, or a cert without its key, are refused", () => {
      assert.throws(() => createClient("http://127.0.0.1:1", { tls: { ca: "x" } }), InvalidArgumentError);
      assert.throws(() => createClient(server.address, { tls: { cert: "x" } }), InvalidArgumentError);
    });
  });

  describe("client certificates (mTLS)", () => {
    let server: TestServer;
    before(async () => {
      server = await startServer({
        bin: holdfastBin,
        args: ["--tls-cert", certs.serverCert, "--tls-key", certs.serverKey, "--tls-client-ca", certs.caCert],
      });
    });
    after(() => server?.stop());

    it("a client with a certificate signed by the client CA is served, over HTTP/1.1 and HTTP/2", async () => {
      for (const protocol of ["connect", "grpc"] as const) {
        const c = createClient(server.address, {
          ...quiet,
          protocol,
          tls: { ca: read(certs.caCert), cert: read(certs.clientCert), key: read(certs.clientKey) },
        });
        const g = await c.lock(key(`mtls-${protocol}`)).ttl("5s").acquire();
        await g.unlock();
        await c.close();
      }
    });

    it("a client without a certificate fails the handshake", async () => {
      const c = createClient(server.address, { ...quiet, retryBudget: "300ms", tls: { ca: read(certs.caCert) } });
      await assert.rejects(c.lock(key("mtls-none")).tryAcquire(), HoldfastError);
      await c.close();
    });
  });

  describe("headers and interceptors", () => {
    let server: TestServer;
    before(async () => {
      server = await startServer({ bin: holdfastBin });
    });
    after(() => server?.stop());

    it("headers go with every request; interceptors run inside the SDK's own and see them", async () => {
      const seen: { method: string; team: string | null; auth: string | null }[] = [];
      const observe: Interceptor = (next) => async (req) => {
        seen.push({ method: req.method.name, team: req.header.get("x-team"), auth: req.header.get("authorization") });
        return next(req);
      };
      const c = createClient(server.address, { ...quiet, headers: { "x-team": "billing" }, bearerToken: "t0k3n", interceptors: [observe] });
      const k = key("headers");
      const g = await c.lock(k).ttl("5s").acquire();
      await c.inspect(k);
      await g.unlock();
      await c.close();
      assert.deepEqual(
        seen.map((s) => s.method),
        ["Acquire", "Inspect", "Release"],
      );
      for (const s of seen) {
        assert.equal(s.team, "billing");
        assert.equal(s.auth, "Bearer t0k3n");
      }
    });
  });
});
