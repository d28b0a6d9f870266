package eventlog_test

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

func TestClassifyFailure(t *testing.T) {
	exc := func(code int32) error { return fmt.Errorf("read: %w", &clickhouse.Exception{Code: code}) }
	for _, c := range []struct {
		err  error
		want eventlog.Failure
	}{
		{exc(60), eventlog.FailurePermanent},  // UNKNOWN_TABLE
		{exc(81), eventlog.FailurePermanent},  // UNKNOWN_DATABASE
		{exc(516), eventlog.FailurePermanent}, // AUTHENTICATION_FAILED
		{exc(62), eventlog.FailurePermanent},  // SYNTAX_ERROR
		{exc(159), eventlog.FailureTemporary}, // TIMEOUT_EXCEEDED
		{exc(252), eventlog.FailureTemporary}, // TOO_MANY_PARTS
		{fmt.Errorf("x: %w", messages.ErrCorrupt), eventlog.FailurePermanent},
		{eventlog.ErrFenced, eventlog.FailurePermanent},
		{eventlog.ErrClosed, eventlog.FailurePermanent},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, eventlog.FailureTemporary},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), eventlog.FailureTemporary},
		{errors.New("something else"), eventlog.FailureUnknown},
	} {
		if got := eventlog.ClassifyFailure(c.err); got != c.want {
			t.Errorf("ClassifyFailure(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// An error of unknown kind is retried for UnknownFailureBound, then given up; a
// temporary one in between starts the bound again.
func TestReadRetryBoundsUnknownFailures(t *testing.T) {
	var r eventlog.ReadRetry
	t0 := time.Unix(1000, 0)
	unknown := errors.New("something else")
	if !r.Retry(unknown, t0) || !r.Retry(unknown, t0.Add(eventlog.UnknownFailureBound-time.Second)) {
		t.Fatal("an unknown failure was not retried within the bound")
	}
	if r.Retry(unknown, t0.Add(eventlog.UnknownFailureBound)) {
		t.Fatal("an unknown failure was retried past the bound")
	}
	if !r.Retry(syscall.ECONNREFUSED, t0.Add(time.Hour)) || !r.Retry(unknown, t0.Add(time.Hour+time.Second)) {
		t.Fatal("a temporary failure did not start the bound again")
	}
}
