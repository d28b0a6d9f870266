package clickhouse

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

var (
	_ eventlog.Fencing  = (*Log)(nil)
	_ eventlog.SeqRaces = (*Log)(nil)
)

// AppendLeased implements eventlog.Fencing. The writer checks the lease with the
// lookup that precedes each group's INSERT (the same round trip), so the check is
// not atomic with the write: see the package doc.
func (l *Log) AppendLeased(ctx context.Context, lease eventlog.Lease, events []messages.Envelope) error {
	return l.append(ctx, &lease, events, false)
}

// SeqRacesUndetected implements eventlog.SeqRaces: two processes appending at
// one free (session, seq) at once may both be told they succeeded (see the
// package doc), so that a node without a shared bus owns the whole log.
func (l *Log) SeqRacesUndetected() bool { return true }

// ownAttempts bounds how often Own takes a new epoch when another taker of one of
// its partitions got the same or a higher epoch at the same moment.
const ownAttempts = 20

// Own implements eventlog.Fencing: it reads the highest epoch recorded, inserts a
// row per partition under the next one, and reads the partitions' rows back.
// ClickHouse cannot make that atomic, so two nodes taking a partition at the same
// moment (one of them evicted from the group while it was being assigned) may pick
// the same epoch; the read-back finds the other's row, and Own takes a new epoch,
// after a random pause, until no other taker holds its epoch or a higher one. The
// taker that returns is then the only one at its epoch, and the others' leases are
// fenced by it, or theirs fence it. Nodes taking different partitions at once
// (every rebalance) may share an epoch, which is harmless: epochs are compared
// within a partition.
func (l *Log) Own(ctx context.Context, node string, partitions []int) (uint64, error) {
	if err := eventlog.CheckOwn(node, partitions); err != nil {
		return 0, fmt.Errorf("eventlog/clickhouse: own: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("eventlog/clickhouse: own: %w", err)
	}
	if l.isClosed() {
		return 0, fmt.Errorf("eventlog/clickhouse: own: %w", eventlog.ErrClosed)
	}
	list := make([]string, len(partitions))
	for i, p := range partitions {
		if p > math.MaxUint32 {
			return 0, fmt.Errorf("eventlog/clickhouse: own: partition %d out of range", p)
		}
		list[i] = strconv.Itoa(p)
	}
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	what := fmt.Sprintf("own partitions %s for node %s", strings.Join(list, ","), node)
	rivalsQuery := "SELECT count() FROM ownership WHERE partition IN (" + strings.Join(list, ", ") + ") AND epoch >= ? AND NOT (epoch = ? AND node = ?)"
	for attempt := 1; ; attempt++ {
		var top uint64
		if err := l.conn.QueryRow(qctx, "SELECT max(epoch) FROM ownership").Scan(&top); err != nil {
			return 0, l.readErr(ctx, what+": read epochs", err)
		}
		epoch := top + 1
		if err := l.record(qctx, node, partitions, epoch); err != nil {
			return 0, l.readErr(ctx, what, err)
		}
		var rivals uint64
		if err := l.conn.QueryRow(qctx, rivalsQuery, epoch, epoch, node).Scan(&rivals); err != nil {
			return 0, l.readErr(ctx, what+": read back", err)
		}
		if rivals == 0 {
			return epoch, nil
		}
		if attempt == ownAttempts {
			return 0, fmt.Errorf("eventlog/clickhouse: %s: other nodes took the same partitions at the same epochs %d times", what, attempt)
		}
		l.cfg.Logger.Warn("eventlog/clickhouse: another node took a partition at the same epoch; taking a new one",
			"node", node, "partitions", partitions, "epoch", epoch, "attempt", attempt)
		pause := time.NewTimer(time.Duration(rand.Int64N(int64(10*time.Millisecond) * int64(attempt))))
		select {
		case <-pause.C:
		case <-qctx.Done():
			pause.Stop()
			return 0, fmt.Errorf("eventlog/clickhouse: %s: %w", what, qctx.Err())
		}
	}
}

// record inserts the ownership rows of one Own attempt.
func (l *Log) record(ctx context.Context, node string, partitions []int, epoch uint64) error {
	b, err := l.conn.PrepareBatch(ctx, "INSERT INTO ownership (partition, epoch, node, ts_us)")
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	now := time.Now().UnixMicro()
	for _, p := range partitions {
		if err := b.Append(uint32(p), epoch, node, now); err != nil {
			return err
		}
	}
	return b.Send()
}

var _ eventlog.EpochReading = (*Log)(nil)

// CurrentEpoch implements eventlog.EpochReading: the partition's highest epoch
// in the ownership table, in one query (the one the writer's lease check runs).
func (l *Log) CurrentEpoch(ctx context.Context, partition int) (uint64, error) {
	if partition < 0 || partition > math.MaxUint32 {
		return 0, fmt.Errorf("eventlog/clickhouse: current epoch: partition %d out of range", partition)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("eventlog/clickhouse: current epoch: %w", err)
	}
	if l.isClosed() {
		return 0, fmt.Errorf("eventlog/clickhouse: current epoch: %w", eventlog.ErrClosed)
	}
	p := strconv.Itoa(partition)
	current, err := l.currentEpochs(ctx, []string{p})
	if err != nil {
		return 0, l.readErr(ctx, "current epoch of partition "+p, err)
	}
	return current[partition], nil
}
