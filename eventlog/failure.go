package eventlog

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

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
	// rows, an invalid event, a ClickHouse schema, auth or syntax error).
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
		if TransientClickHouseCode(exc.Code) {
			return FailureTemporary
		}
		return FailurePermanent
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
