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
		// An overload, a lost connection, a keeper fault: waited out by readers
		// (they were permanent, failing a session starting during one).
		{exc(439), eventlog.FailureTemporary},  // CANNOT_SCHEDULE_TASK
		{exc(1000), eventlog.FailureTemporary}, // POCO_EXCEPTION
		{exc(3), eventlog.FailureTemporary},    // UNEXPECTED_END_OF_FILE
		{exc(173), eventlog.FailureTemporary},  // CANNOT_ALLOCATE_MEMORY
		{exc(225), eventlog.FailureTemporary},  // NO_ZOOKEEPER
		{exc(279), eventlog.FailureTemporary},  // ALL_CONNECTION_TRIES_FAILED
		{exc(497), eventlog.FailurePermanent},  // ACCESS_DENIED
		{exc(16), eventlog.FailurePermanent},   // NO_SUCH_COLUMN_IN_TABLE
		{exc(4242), eventlog.FailureUnknown},   // a code of neither list
		// A pool whose connections were all busy (it was unknown: given up
		// after UnknownFailureBound).
		{fmt.Errorf("all 8 connections were busy: %w", clickhouse.ErrAcquireConnTimeout), eventlog.FailureTemporary},
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

// RetryRead retries a temporary failure until the read succeeds, and stops at
// once on a permanent one or when more says no.
func TestRetryRead(t *testing.T) {
	ctx := t.Context()
	var told []int
	n, err := eventlog.RetryRead(ctx, time.Millisecond, nil, func(attempt int) error {
		if attempt < 3 {
			return syscall.ECONNREFUSED
		}
		return nil
	}, func(attempt int, _ time.Duration, _ error) { told = append(told, attempt) })
	if n != 3 || err != nil || len(told) != 2 {
		t.Errorf("two outages then a read: %d attempts, %v, told of %v; want 3, nil, [1 2]", n, err, told)
	}
	if n, err := eventlog.RetryRead(ctx, time.Millisecond, nil, func(int) error { return eventlog.ErrClosed }, nil); n != 1 || err == nil {
		t.Errorf("a closed log: %d attempts, %v; want 1 and the error", n, err)
	}
	if n, err := eventlog.RetryRead(ctx, time.Millisecond, func() bool { return false }, func(int) error { return syscall.ECONNREFUSED }, nil); n != 1 || err == nil {
		t.Errorf("more says no: %d attempts, %v; want 1 and the error", n, err)
	}
}
