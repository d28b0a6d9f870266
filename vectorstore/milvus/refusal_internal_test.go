package milvus

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A write the server answered with an error about what was sent is a refusal (the
// same items fail again); a failure of the connection, a timeout or a passing
// state of the server is not.
func TestRefusal(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{client.ErrServiceFailed(errors.New("the length (70000) of 1th string exceeds max length (65535)")), true},
		{errors.New("param dim mismatch"), true},
		{status.Error(codes.Unavailable, "connection refused"), false},
		{fmt.Errorf("upsert: %w", status.Error(codes.DeadlineExceeded, "context deadline exceeded")), false},
		{status.Error(codes.Internal, "server panicked"), false},
		{client.ErrServiceFailed(errors.New("rate limit exceeded[rate=100]")), false},
		{client.ErrServiceFailed(errors.New("deny to write, reason: memory quota exhausted")), false},
		{client.ErrServiceFailed(errors.New("collection not loaded")), false},
		{context.DeadlineExceeded, false},
	} {
		if got := refusal(tc.err); got != tc.want {
			t.Errorf("refusal(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
