package eventlog

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	chproto "github.com/ClickHouse/clickhouse-go/v2/lib/proto"

	"github.com/troupe-run/troupe/messages"
)

// Failure is what a failed operation on the log says of a retry (ClassifyFailure).
type Failure int

const (
	// FailureUnknown: nothing tells whether a retry may succeed. Readers retry it
	// for a while (ReadRetry), then give up.
	FailureUnknown Failure = iota
	// FailureTemporary: an outage a retry may outlast (a refused, reset or timed
	// out connection, a ClickHouse error of the kind that passes).
	FailureTemporary
	// FailurePermanent: no retry succeeds (a fenced writer, a closed log, corrupt
	// rows, an invalid event, a ClickHouse schema, auth or syntax error; other
	// ClickHouse codes than these and the temporary ones are unknown).
	FailurePermanent
)

// ClassifyFailure tells whether a retry of the operation that failed with err may
// succeed. It is the one classification of the session's start reads
// (actors.SessionActor), a node's resume listings and A2A ResumePushes; the
// ClickHouse writer retries by the same table of codes (TransientClickHouseCode).
func ClassifyFailure(err error) Failure {
	if errors.Is(err, ErrFenced) || errors.Is(err, ErrClosed) || errors.Is(err, messages.ErrCorrupt) || errors.Is(err, ErrInvalidEvent) {
		return FailurePermanent
	}
	var exc *chproto.Exception
	if errors.As(err, &exc) {
		switch {
		case TransientClickHouseCode(exc.Code), transientClickHouseReadCodes[exc.Code]:
			return FailureTemporary
		case permanentClickHouseCodes[exc.Code]:
			return FailurePermanent
		}
		// A code of neither list: retried for a while (a read is idempotent;
		// the server's list of codes is long and grows).
		return FailureUnknown
	}
	if errors.Is(err, ch.ErrAcquireConnTimeout) {
		// Every connection of the pool was busy for DialTimeout: a restart
		// resuming many sessions against a slow server meets it, and it passes.
		return FailureTemporary
	}
	var tmp interface{ Temporary() bool }
	if errors.As(err, &tmp) && tmp.Temporary() {
		return FailureTemporary
	}
	var nerr net.Error
	if errors.As(err, &nerr) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return FailureTemporary
	}
	return FailureUnknown
}

// TransientClickHouseCode reports whether a ClickHouse exception of this code may
// pass: a timeout, an overload, a network or replica fault. Any other code (an
// unknown table, database or column, a syntax error, failed authentication, a
// denied access, …) is permanent.
func TransientClickHouseCode(code int32) bool { return transientClickHouseCodes[code] }

var transientClickHouseCodes = map[int32]bool{
	159: true, // TIMEOUT_EXCEEDED
	164: true, // READONLY
	202: true, // TOO_MANY_SIMULTANEOUS_QUERIES
	203: true, // NO_FREE_CONNECTION
	209: true, // SOCKET_TIMEOUT
	210: true, // NETWORK_ERROR
	241: true, // MEMORY_LIMIT_EXCEEDED
	242: true, // TABLE_IS_READ_ONLY
	252: true, // TOO_MANY_PARTS
	285: true, // TOO_FEW_LIVE_REPLICAS
	319: true, // UNKNOWN_STATUS_OF_INSERT
	394: true, // QUERY_WAS_CANCELLED
	425: true, // SYSTEM_ERROR
	999: true, // KEEPER_EXCEPTION
}

// transientClickHouseReadCodes are codes that pass too, which the writer's table
// leaves out (a write retried on them might be applied twice; a read may be
// retried on anything that passes): an overloaded server, a lost connection, a
// replica or keeper fault.
var transientClickHouseReadCodes = map[int32]bool{
	3:    true, // UNEXPECTED_END_OF_FILE
	173:  true, // CANNOT_ALLOCATE_MEMORY
	225:  true, // NO_ZOOKEEPER
	279:  true, // ALL_CONNECTION_TRIES_FAILED
	439:  true, // CANNOT_SCHEDULE_TASK
	1000: true, // POCO_EXCEPTION (a connection's I/O)
}

// permanentClickHouseCodes are codes no retry outlasts: the schema, the query,
// the user's rights. ClassifyFailure counts a code of neither table as unknown.
var permanentClickHouseCodes = map[int32]bool{
	8:   true, // THERE_IS_NO_COLUMN
	10:  true, // NOT_FOUND_COLUMN_IN_BLOCK
	16:  true, // NO_SUCH_COLUMN_IN_TABLE
	36:  true, // BAD_ARGUMENTS
	43:  true, // ILLEGAL_TYPE_OF_ARGUMENT
	46:  true, // UNKNOWN_FUNCTION
	47:  true, // UNKNOWN_IDENTIFIER
	53:  true, // TYPE_MISMATCH
	60:  true, // UNKNOWN_TABLE
	62:  true, // SYNTAX_ERROR
	81:  true, // UNKNOWN_DATABASE
	192: true, // UNKNOWN_USER
	194: true, // REQUIRED_PASSWORD
	497: true, // ACCESS_DENIED
	516: true, // AUTHENTICATION_FAILED
}

// UnknownFailureBound is how long ReadRetry retries a read that keeps failing
// with errors ClassifyFailure cannot tell (FailureUnknown) before it gives up.
var UnknownFailureBound = 2 * time.Minute

// ReadRetry decides, attempt after attempt, whether a read of the log that must
// succeed (it would leave work undone) is tried again: a temporary failure for as
// long as it lasts, a permanent one never, an unknown one for UnknownFailureBound
// of unknown failures in a row. The zero value is ready.
type ReadRetry struct{ unknownSince time.Time }

// Retry reports whether the read that failed with err at now is tried again.
func (r *ReadRetry) Retry(err error, now time.Time) bool {
	switch ClassifyFailure(err) {
	case FailureTemporary:
		r.unknownSince = time.Time{}
		return true
	case FailurePermanent:
		return false
	}
	if r.unknownSince.IsZero() {
		r.unknownSince = now
	}
	return now.Sub(r.unknownSince) < UnknownFailureBound
}

// RetryRead runs read (told its attempt, from 1) until it succeeds, ReadRetry gives
// its failure up, more (if not nil) says no, or ctx ends; between attempts it
// waits first, doubling up to 5 s, and tells failed (if not nil) of each failure
// it retries. It returns the attempts made and read's last error: the one retry
// loop of the reads that must succeed (a session's start reads, a node's resume
// listings, A2A's push-follow listings).
func RetryRead(ctx context.Context, first time.Duration, more func() bool, read func(attempt int) error, failed func(attempt int, wait time.Duration, err error)) (int, error) {
	var retry ReadRetry
	wait := first
	for attempt := 1; ; attempt++ {
		err := read(attempt)
		if err == nil {
			return attempt, nil
		}
		if ctx.Err() != nil || more != nil && !more() || !retry.Retry(err, time.Now()) {
			return attempt, err
		}
		if failed != nil {
			failed(attempt, wait, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return attempt, err
		}
		wait = min(2*wait, 5*time.Second)
	}
}
