package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	holdfast "github.com/holdfast/holdfast/sdk-go"

	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// Exit codes of the client commands. A script can branch on them:
//
//	0   success
//	1   an error: bad flags or arguments, the server refused the request
//	    (invalid_argument, permission_denied, ...), anything unexpected
//	3   not acquired (lock, acquire), not released or not extended (the
//	    owner token no longer holds the lock)
//	69  the server cannot be reached or is unavailable (EX_UNAVAILABLE)
//	75  lock: the lease was lost while the command ran; the command was
//	    stopped (EX_TEMPFAIL)
//
// `holdfast lock` otherwise exits with its command's exit code (128+N when
// the command was ended by signal N), as a shell does.
const (
	ExitOK          = 0
	ExitError       = 1
	ExitNotAcquired = 3
	ExitUnavailable = 69
	ExitLeaseLost   = 75
)

// DefaultServer is the server the client commands talk to without --server.
const DefaultServer = "http://" + DefaultAddr

// exitError carries a process exit code through cobra to Main.
type exitError struct {
	code int
	err  error // nil: nothing to print (the command already said it)
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exitCode is the exit code for an error returned by a command.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return ExitError
}

// clientOptions are the flags every client command shares.
type clientOptions struct {
	server     string
	token      string
	output     string
	caCert     string
	clientCert string
	clientKey  string

	transport *http.Transport // built by resolve
}

func addClientFlags(cmd *cobra.Command, o *clientOptions) {
	f := cmd.Flags()
	f.StringVar(&o.server, "server", DefaultServer, "server base URL (env HOLDFAST_SERVER)")
	f.StringVar(&o.token, "token", "", "bearer token sent as Authorization: Bearer TOKEN (env HOLDFAST_TOKEN)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table or json (env HOLDFAST_OUTPUT)")
	f.StringVar(&o.caCert, "ca-cert", "", "PEM CA certificate(s) to verify an https:// server with, instead of the system's (env HOLDFAST_CA_CERT)")
	f.StringVar(&o.clientCert, "client-cert", "", "PEM client certificate for servers that require one (mTLS; env HOLDFAST_CLIENT_CERT)")
	f.StringVar(&o.clientKey, "client-key", "", "PEM private key of --client-cert (env HOLDFAST_CLIENT_KEY)")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp
	})
}

// resolve fills flags not given on the command line from the environment
// and checks them.
func (o *clientOptions) resolve(cmd *cobra.Command) error {
	for _, e := range []struct {
		flag, env string
		dst       *string
	}{
		{"server", "HOLDFAST_SERVER", &o.server},
		{"token", "HOLDFAST_TOKEN", &o.token},
		{"output", "HOLDFAST_OUTPUT", &o.output},
		{"ca-cert", "HOLDFAST_CA_CERT", &o.caCert},
		{"client-cert", "HOLDFAST_CLIENT_CERT", &o.clientCert},
		{"client-key", "HOLDFAST_CLIENT_KEY", &o.clientKey},
	} {
		if !cmd.Flags().Changed(e.flag) {
			if v, ok := os.LookupEnv(e.env); ok && v != "" {
				*e.dst = v
			}
		}
	}
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("--output: %q is not table or json", o.output)
	}
	u, err := url.Parse(o.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--server: %q is not a base URL like http://127.0.0.1:7410", o.server)
	}
	o.server = strings.TrimRight(o.server, "/")
	tr, err := o.newTransport(u.Scheme == "https")
	if err != nil {
		return err
	}
	o.transport = tr
	return nil
}

// newTransport is the one HTTP transport of a command: HTTP/1.1 over
// http:// (Connect's protocol needs nothing more), HTTP/2 or HTTP/1.1 over
// https://, with --ca-cert and --client-cert when given.
func (o *clientOptions) newTransport(https bool) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	if !https {
		if o.caCert != "" || o.clientCert != "" {
			return nil, fmt.Errorf("--ca-cert and --client-cert need an https:// --server, not %s", o.server)
		}
		tr.Protocols = protos
		return tr, nil
	}
	protos.SetHTTP2(true)
	tr.Protocols = protos
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.caCert != "" {
		pem, err := os.ReadFile(o.caCert)
		if err != nil {
			return nil, fmt.Errorf("--ca-cert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-cert %s: no PEM certificate in it", o.caCert)
		}
		cfg.RootCAs = pool
	}
	if (o.clientCert == "") != (o.clientKey == "") {
		return nil, errors.New("--client-cert and --client-key go together")
	}
	if o.clientCert != "" {
		cert, err := tls.LoadX509KeyPair(o.clientCert, o.clientKey)
		if err != nil {
			return nil, fmt.Errorf("--client-cert: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	tr.TLSClientConfig = cfg
	return tr, nil
}

// close drops the command's idle connections.
func (o *clientOptions) close() {
	if o.transport != nil {
		o.transport.CloseIdleConnections()
	}
}

// dial returns an SDK client for the server.
func (o *clientOptions) dial(holder string) (*holdfast.Client, error) {
	opts := []holdfast.Option{holdfast.WithHTTPClient(&http.Client{Transport: o.transport})}
	if o.token != "" {
		opts = append(opts, holdfast.WithBearerToken(o.token))
	}
	if holder != "" {
		opts = append(opts, holdfast.WithHolder(holder))
	}
	return holdfast.Dial(o.server, opts...)
}

// rawClient is the generated Connect client, for the lease commands
// (acquire, release, extend): a lease that outlives this process has no
// guard, and the SDK keeps owner tokens inside its guards by design.
func (o *clientOptions) rawClient() (lockv1connect.LockServiceClient, func()) {
	hc := &http.Client{Transport: o.transport}
	var opts []connect.ClientOption
	if o.token != "" {
		opts = append(opts, connect.WithInterceptors(bearer(o.token)))
	}
	return lockv1connect.NewLockServiceClient(hc, o.server, opts...), o.close
}

// bearer adds the Authorization header to unary calls.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// callError turns a failed call into an exitError with a message a person
// can act on: "cannot reach server at URL: connection refused" rather than
// a transport error chain.
func (o *clientOptions) callError(err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	if reason, ok := unreachable(err); ok {
		return &exitError{code: ExitUnavailable, err: fmt.Errorf("cannot reach server at %s: %s", o.server, reason)}
	}
	switch {
	case errors.Is(err, holdfast.ErrUnavailable), connect.CodeOf(err) == connect.CodeUnavailable:
		return &exitError{code: ExitUnavailable, err: fmt.Errorf("server at %s unavailable: %s", o.server, message(err))}
	case errors.Is(err, holdfast.ErrUnauthenticated), connect.CodeOf(err) == connect.CodeUnauthenticated:
		return &exitError{code: ExitError, err: fmt.Errorf("unauthenticated: %s (give a token with --token or HOLDFAST_TOKEN)", message(err))}
	case errors.Is(err, holdfast.ErrNotAcquired):
		return &exitError{code: ExitNotAcquired, err: errors.New(message(err))}
	}
	return &exitError{code: ExitError, err: errors.New(message(err))}
}

// unreachable reports whether err is a failure to connect, and why, in a
// few words.
func unreachable(err error) (string, bool) {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused", true
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to host", true
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset", true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "cannot resolve " + dnsErr.Name, true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return opErr.Err.Error(), true
	}
	// The SDK strips connect's types and keeps the message.
	msg := err.Error()
	for _, s := range []string{"connection refused", "no route to host", "no such host", "i/o timeout"} {
		if strings.Contains(msg, s) {
			return s, true
		}
	}
	return "", false
}

// message is the server's message without the SDK's and Connect's
// prefixes ("holdfast: Acquire: invalid_argument: ttl: ..." -> "ttl: ...").
func message(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code().String() + ": " + ce.Message()
	}
	return strings.TrimPrefix(err.Error(), "holdfast: ")
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
