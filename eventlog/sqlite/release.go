package sqlite

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/eventlog"
)

var _ eventlog.Releasing = (*Log)(nil)

// Release implements eventlog.Releasing. The writer marks the owner records in
// a write transaction, which SQLite serializes with every Own: a partition taken
// by a later owner before it keeps its current record unmarked.
func (l *Log) Release(ctx context.Context, node string, epoch uint64, partitions []int, atUS int64) error {
	if err := eventlog.CheckRelease(node, epoch, partitions, atUS); err != nil {
		return fmt.Errorf("eventlog/sqlite: release: %w", err)
	}
	return l.markOwners(ctx, "release", "release partitions", &releaseReq{node: node, epoch: epoch, partitions: slices.Clone(partitions), atUS: atUS})
}

// MarkPublished implements eventlog.Releasing, as Release does: in a write
// transaction of the writer, raising the owner records' published_us.
func (l *Log) MarkPublished(ctx context.Context, node string, epoch uint64, partitions []int, throughUS int64) error {
	if err := eventlog.CheckMark(node, epoch, partitions, throughUS); err != nil {
		return fmt.Errorf("eventlog/sqlite: mark published: %w", err)
	}
	return l.markOwners(ctx, "mark published", "mark partitions published", &releaseReq{node: node, epoch: epoch, partitions: slices.Clone(partitions), atUS: throughUS, mark: true})
}

// markOwners hands the writer o, a release or a mark of owner records whose
// arguments were checked (eventlog.CheckRelease, CheckMark), once the log can take
// it. what names the call in errors, and doing what it does to a read-only log.
func (l *Log) markOwners(ctx context.Context, what, doing string, o *releaseReq) error {
	if err := l.writable(ctx, what, doing+" of"); err != nil {
		return err
	}
	if o.epoch > math.MaxInt64 {
		return fmt.Errorf("eventlog/sqlite: %s: epoch %d out of range", what, o.epoch)
	}
	for _, p := range o.partitions {
		if p > math.MaxInt32 {
			return fmt.Errorf("eventlog/sqlite: %s: partition %d out of range", what, p)
		}
	}
	return l.submit(ctx, &appendReq{ctx: ctx, free: o, done: make(chan error, 1)})
}

// Owners implements eventlog.Releasing: one query of the owner records at each
// partition's highest epoch.
func (l *Log) Owners(ctx context.Context, partitions []int) (map[int]eventlog.Ownership, error) {
	if err := eventlog.CheckPartitions(partitions); err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: owners: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: owners: %w", err)
	}
	if l.isClosed() {
		return nil, fmt.Errorf("eventlog/sqlite: owners: %w", eventlog.ErrClosed)
	}
	out := make(map[int]eventlog.Ownership, len(partitions))
	if len(partitions) == 0 {
		return out, nil
	}
	marks := make([]string, len(partitions))
	args := make([]any, len(partitions))
	for i, p := range partitions {
		if p > math.MaxInt32 {
			return nil, fmt.Errorf("eventlog/sqlite: owners: partition %d out of range", p)
		}
		marks[i], args[i] = "?", int64(p)
	}
	rows, err := l.rdb.QueryContext(ctx, `SELECT o.partition, o.epoch, o.node, o.released_us, o.published_us FROM ownership o
		WHERE o.partition IN (`+strings.Join(marks, ", ")+`)
		AND o.epoch = (SELECT max(epoch) FROM ownership WHERE partition = o.partition)`, args...)
	if err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: owners of partitions %v: %w", partitions, err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var (
			p     int
			epoch int64
			o     eventlog.Ownership
		)
		if err := rows.Scan(&p, &epoch, &o.Node, &o.ReleasedUS, &o.PublishedUS); err != nil {
			return nil, fmt.Errorf("eventlog/sqlite: owners of partitions %v: %w", partitions, err)
		}
		o.Epoch = uint64(epoch)
		out[p] = o
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: owners of partitions %v: %w", partitions, err)
	}
	return out, nil
}

var _ eventlog.EpochReading = (*Log)(nil)

// CurrentEpoch implements eventlog.EpochReading: the partition's highest epoch
// in the ownership table, read in one query on the read pool.
func (l *Log) CurrentEpoch(ctx context.Context, partition int) (uint64, error) {
	if partition < 0 || partition > math.MaxInt32 {
		return 0, fmt.Errorf("eventlog/sqlite: current epoch: partition %d out of range", partition)
	}
	if l.isClosed() {
		return 0, fmt.Errorf("eventlog/sqlite: current epoch: %w", eventlog.ErrClosed)
	}
	var epoch int64
	if err := l.rdb.QueryRowContext(ctx, `SELECT coalesce(max(epoch), 0) FROM ownership WHERE partition = ?`, int64(partition)).Scan(&epoch); err != nil {
		return 0, l.readErr(fmt.Sprintf("current epoch of partition %d", partition), err)
	}
	return uint64(epoch), nil
}
