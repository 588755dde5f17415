package httpserver

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/plugins/memory"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// The live view's static files are served even when every API call is
// refused (as with --auth-tokens and no token): only its API calls are
// authenticated.
func TestLiveViewMountedAndPublic(t *testing.T) {
	b := memory.New()
	defer b.Close()
	e, err := engine.New(context.Background(), b, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	refuseAll := connect.UnaryInterceptorFunc(func(connect.UnaryFunc) connect.UnaryFunc {
		return func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no token"))
		}
	})
	h := Handler(e, grpchealth.NewStaticChecker(lockv1connect.LockServiceName), WithInterceptors(refuseAll))

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/", nil))
	// 200 with the bundle built, 503 ("UI not built") without it.
	if rec.Code != http.StatusOK && rec.Code != http.StatusServiceUnavailable {
		t.Errorf("GET /ui/: status %d, want 200 or 503", rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui", nil))
	if loc := rec.Header().Get("Location"); rec.Code/100 != 3 || loc != "/ui/" {
		t.Errorf("GET /ui: status %d Location %q, want a redirect to /ui/", rec.Code, loc)
	}
	// The API itself stays behind the interceptor.
	rec = httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, lockv1connect.LockServiceGetServerInfoProcedure, strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("POST GetServerInfo through the refusing interceptor: status %d, want 401", rec.Code)
	}
}
