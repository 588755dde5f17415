package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// echoServer answers GetServerInfo with a constant: a connect-go unary RPC
// that does no work, the floor under any RPC lock service. It runs in its own
// process (this program with -echo-server) so it gets the same CPU share as a
// holdfast server would.
type echoServer struct {
	lockv1connect.UnimplementedLockServiceHandler
}

func (echoServer) GetServerInfo(context.Context, *lockv1.GetServerInfoRequest) (*lockv1.GetServerInfoResponse, error) {
	return &lockv1.GetServerInfoResponse{Version: "echo"}, nil
}

func runEchoServer() error {
	mux := http.NewServeMux()
	mux.Handle(lockv1connect.NewLockServiceHandler(echoServer{}))
	srv := &http.Server{Handler: mux, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("holdfast serving addr=%s backend=echo shared=false durable=false\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}
