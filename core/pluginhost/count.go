package pluginhost

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// Count implements backend.CountBackend. A plugin that does not serve the
// call (it answers Unimplemented) gets errors.ErrUnsupported, and the
// caller lists instead.
func (h *Host) Count(ctx context.Context) (int64, error) {
	var resp *backendv1.CountResponse
	unimplemented := false
	err := h.unary(ctx, "Count", func(ctx context.Context, c backendv1.BackendServiceClient) (err error) {
		resp, err = c.Count(ctx, &backendv1.CountRequest{})
		unimplemented = status.Code(err) == codes.Unimplemented
		return err
	})
	if unimplemented {
		return 0, fmt.Errorf("pluginhost: plugin %s: Count: %w", h.cfg.Name, errors.ErrUnsupported)
	}
	if err != nil {
		return 0, err
	}
	return resp.GetLeases(), nil
}
