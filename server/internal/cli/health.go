package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// newHealth is `holdfast health`: one grpc.health.v1 Check, for probes that
// cannot speak gRPC over TLS themselves (Kubernetes' grpc probe has no TLS,
// so an exec probe runs this).
func newHealth(stdout io.Writer) *cobra.Command {
	var (
		o          clientOptions
		service    string
		serverName string
		timeout    time.Duration
		live       bool
	)
	cmd := &cobra.Command{
		Use:   "health",
		Short: "check the server's health (grpc.health.v1): exit 0 while it serves, for probes",
		Long: `Health asks the server's gRPC health service (grpc.health.v1.Health/Check)
whether it serves, and prints the answer: SERVING, or NOT_SERVING while its
backend plugin is down or restarting and once it is shutting down.

--live succeeds on any answer, SERVING or NOT_SERVING: a liveness probe
should restart a server that does not answer, not one whose backend (etcd,
Redis, PostgreSQL) is away, which restarting would not bring back.

The health service needs no token. With --tls-client-ca on the server, give
a client certificate (--client-cert, --client-key). --tls-server-name checks
the server's certificate for that name rather than the --server host, for a
probe that dials 127.0.0.1 a certificate issued to the service's DNS name.

Exit status: 0 serving (--live: answered), 69 not serving or unreachable,
1 any other error.`,
		Example: `  holdfast health
  holdfast health --live
  holdfast health --server https://127.0.0.1:7410 --ca-cert /etc/holdfast/tls/ca.crt --tls-server-name holdfast.example`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.resolve(cmd); err != nil {
				return err
			}
			defer o.close()
			if serverName != "" {
				if !strings.HasPrefix(o.server, "https://") {
					return fmt.Errorf("--tls-server-name needs an https:// --server, not %s", o.server)
				}
				o.transport.TLSClientConfig.ServerName = serverName
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			client := connect.NewClient[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse](
				&http.Client{Transport: o.transport}, o.server+"/grpc.health.v1.Health/Check")
			resp, err := client.CallUnary(ctx, connect.NewRequest(&healthpb.HealthCheckRequest{Service: service}))
			if err != nil {
				if ctx.Err() != nil && cmd.Context().Err() == nil {
					return &exitError{code: ExitUnavailable, err: fmt.Errorf("no answer from %s within %s", o.server, timeout)}
				}
				return o.callError(err)
			}
			status := resp.Msg.GetStatus()
			if o.output == "json" {
				if err := printJSON(stdout, map[string]string{"server": o.server, "service": service, "status": status.String()}); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(stdout, status)
			}
			if status != healthpb.HealthCheckResponse_SERVING && !live {
				return &exitError{code: ExitUnavailable}
			}
			return nil
		},
	}
	addClientFlags(cmd, &o)
	f := cmd.Flags()
	f.StringVar(&service, "service", lockv1connect.LockServiceName, `service to ask about ("" is the whole server)`)
	f.StringVar(&serverName, "tls-server-name", "", "verify the server's certificate for this name instead of the --server host")
	f.DurationVar(&timeout, "timeout", 5*time.Second, "give up (exit 69) when there is no answer within this")
	f.BoolVar(&live, "live", false, "succeed on any answer, SERVING or NOT_SERVING (for liveness probes)")
	return cmd
}
