package clickhouse

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/troupe-run/troupe/eventlog"
)

var _ eventlog.Releasing = (*Log)(nil)

// Release implements eventlog.Releasing: it reads the partitions' current epochs
// and owners, and inserts a row in table releases for each that node still owns
// at epoch. ClickHouse cannot make the check and the insert one step: a release
// whose check passed just before another node took the partition lands at the
// old epoch, where Owners, which matches each partition's latest ownership row,
// does not see it.
func (l *Log) Release(ctx context.Context, node string, epoch uint64, partitions []int, atUS int64) error {
	if err := eventlog.CheckRelease(node, epoch, partitions, atUS); err != nil {
		return fmt.Errorf("eventlog/clickhouse: release: %w", err)
	}
	return l.insertOwned(ctx, "release", "release partitions %s of node %s at epoch %d",
		"INSERT INTO releases (partition, epoch, node, released_us)", node, epoch, partitions, atUS)
}

// MarkPublished implements eventlog.Releasing as Release does (the same check,
// then one INSERT, and the same race: a mark that lands at an epoch no longer
// the latest is not seen), into table published_marks: one row per partition,
// of which merges keep the greatest.
func (l *Log) MarkPublished(ctx context.Context, node string, epoch uint64, partitions []int, throughUS int64) error {
	if err := eventlog.CheckMark(node, epoch, partitions, throughUS); err != nil {
		return fmt.Errorf("eventlog/clickhouse: mark published: %w", err)
	}
	return l.insertOwned(ctx, "mark published", "mark partitions %s of node %s at epoch %d published",
		"INSERT INTO published_marks (partition, epoch, node, published_us)", node, epoch, partitions, uint64(throughUS))
}

// insertOwned inserts, with insert, a row (partition, epoch, node, value) for each
// of partitions (checked already) whose current owner record is node's at epoch,
// and none for the others. op names the call in errors, and whatFormat, given the
// partition list, node and epoch, what it does.
func (l *Log) insertOwned(ctx context.Context, op, whatFormat, insert string, node string, epoch uint64, partitions []int, value any) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("eventlog/clickhouse: %s: %w", op, err)
	}
	if l.isClosed() {
		return fmt.Errorf("eventlog/clickhouse: %s: %w", op, eventlog.ErrClosed)
	}
	list, err := partitionList(partitions)
	if err != nil {
		return fmt.Errorf("eventlog/clickhouse: %s: %w", op, err)
	}
	what := fmt.Sprintf(whatFormat, list, node, epoch)
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	owners, err := l.owners(qctx, list, 0)
	if err != nil {
		return l.readErr(ctx, what, err)
	}
	var mine []int
	for _, p := range partitions {
		if o, ok := owners[p]; ok && o.Epoch == epoch && o.Node == node {
			mine = append(mine, p)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	b, err := l.conn.PrepareBatch(qctx, insert)
	if err != nil {
		return l.readErr(ctx, what, err)
	}
	defer func() { _ = b.Close() }()
	for _, p := range mine {
		if err := b.Append(uint32(p), epoch, node, value); err != nil {
			return l.readErr(ctx, what, err)
		}
	}
	if err := b.Send(); err != nil {
		return l.readErr(ctx, what, err)
	}
	return nil
}

// Owners implements eventlog.Releasing: each partition's latest ownership row,
// with the time its node released it at that epoch (table releases) and its
// greatest mark at that epoch (table published_marks).
func (l *Log) Owners(ctx context.Context, partitions []int) (map[int]eventlog.Ownership, error) {
	if err := eventlog.CheckPartitions(partitions); err != nil {
		return nil, fmt.Errorf("eventlog/clickhouse: owners: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("eventlog/clickhouse: owners: %w", err)
	}
	if l.isClosed() {
		return nil, fmt.Errorf("eventlog/clickhouse: owners: %w", eventlog.ErrClosed)
	}
	if len(partitions) == 0 {
		return map[int]eventlog.Ownership{}, nil
	}
	list, err := partitionList(partitions)
	if err != nil {
		return nil, fmt.Errorf("eventlog/clickhouse: owners: %w", err)
	}
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	return l.ownerRecords(ctx, qctx, list, 0)
}

// TakeOver implements eventlog.Releasing: Own, then a read of each partition's
// latest ownership row below the epoch it took, with its release and mark, as
// Owners reads them. ClickHouse cannot make the two one step; what the read
// guarantees rests on Own's read-back (see the package doc): Own returns an
// epoch only once no other taker's row at it or above was seen, so an Own of
// another node that returned before this one began recorded a lower epoch, and
// the read, which comes after this one's rows landed, finds its row or a later
// one. What it cannot promise errs toward publishing more: the latest row below
// may be that of an attempt abandoned for a higher epoch (never released nor
// marked), and a release or mark whose check passed before the new epoch was
// recorded may land after the read, and be missed.
func (l *Log) TakeOver(ctx context.Context, node string, partitions []int) (uint64, map[int]eventlog.Ownership, error) {
	epoch, err := l.Own(ctx, node, partitions)
	if err != nil {
		return 0, nil, err
	}
	list, err := partitionList(partitions) // checked by Own
	if err != nil {
		return 0, nil, fmt.Errorf("eventlog/clickhouse: take over: %w", err)
	}
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	previous, err := l.ownerRecords(ctx, qctx, list, epoch)
	if err != nil {
		// The epoch is recorded: a caller that takes the partitions again finds
		// this attempt's rows below its own, neither released nor marked.
		return 0, nil, fmt.Errorf("eventlog/clickhouse: take over partitions %s for node %s at epoch %d: %w", list, node, epoch, err)
	}
	return epoch, previous, nil
}

// ownerRecords reads, for each partition of list (decimal numbers,
// comma-separated), its latest ownership row (below epoch below, if not 0) with
// the time its node released it at that epoch (table releases) and its greatest
// mark there (table published_marks). ctx is the caller's, qctx the query's.
func (l *Log) ownerRecords(ctx, qctx context.Context, list string, below uint64) (map[int]eventlog.Ownership, error) {
	out, err := l.owners(qctx, list, below)
	if err != nil {
		return nil, l.readErr(ctx, "owners of partitions "+list, err)
	}
	rows, err := l.conn.Query(qctx, "SELECT partition, epoch, node, max(released_us) FROM releases WHERE partition IN ("+list+") GROUP BY partition, epoch, node")
	if err != nil {
		return nil, l.readErr(ctx, "owners of partitions "+list+": read releases", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			p     uint32
			epoch uint64
			node  string
			at    int64
		)
		if err := rows.Scan(&p, &epoch, &node, &at); err != nil {
			return nil, l.readErr(ctx, "owners of partitions "+list+": read releases", err)
		}
		if o, ok := out[int(p)]; ok && o.Epoch == epoch && o.Node == node {
			o.ReleasedUS = at
			out[int(p)] = o
		}
	}
	if err := rows.Err(); err != nil {
		return nil, l.readErr(ctx, "owners of partitions "+list+": read releases", err)
	}
	rows.Close()
	marks, err := l.conn.Query(qctx, "SELECT partition, epoch, node, max(published_us) FROM published_marks WHERE partition IN ("+list+") GROUP BY partition, epoch, node")
	if err != nil {
		return nil, l.readErr(ctx, "owners of partitions "+list+": read published marks", err)
	}
	defer marks.Close()
	for marks.Next() {
		var (
			p     uint32
			epoch uint64
			node  string
			at    uint64
		)
		if err := marks.Scan(&p, &epoch, &node, &at); err != nil {
			return nil, l.readErr(ctx, "owners of partitions "+list+": read published marks", err)
		}
		if o, ok := out[int(p)]; ok && o.Epoch == epoch && o.Node == node && at <= math.MaxInt64 {
			o.PublishedUS = int64(at)
			out[int(p)] = o
		}
	}
	if err := marks.Err(); err != nil {
		return nil, l.readErr(ctx, "owners of partitions "+list+": read published marks", err)
	}
	return out, nil
}

// owners reads the latest ownership row of each partition of list (decimal
// numbers, comma-separated), without releases: the latest below epoch below, if
// it is not 0.
func (l *Log) owners(ctx context.Context, list string, below uint64) (map[int]eventlog.Ownership, error) {
	where := ""
	if below > 0 {
		where = " AND epoch < " + strconv.FormatUint(below, 10)
	}
	rows, err := l.conn.Query(ctx, "SELECT partition, max(epoch), argMax(node, epoch) FROM ownership WHERE partition IN ("+list+")"+where+" GROUP BY partition")
	if err != nil {
		return nil, fmt.Errorf("read the owners: %w", err)
	}
	defer rows.Close()
	out := map[int]eventlog.Ownership{}
	for rows.Next() {
		var (
			p uint32
			o eventlog.Ownership
		)
		if err := rows.Scan(&p, &o.Epoch, &o.Node); err != nil {
			return nil, fmt.Errorf("read the owners: %w", err)
		}
		out[int(p)] = o
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the owners: %w", err)
	}
	return out, nil
}

// partitionList formats partitions for an IN list, refusing those beyond UInt32.
func partitionList(partitions []int) (string, error) {
	list := make([]string, len(partitions))
	for i, p := range partitions {
		if p > math.MaxUint32 {
			return "", fmt.Errorf("partition %d out of range", p)
		}
		list[i] = strconv.Itoa(p)
	}
	return strings.Join(list, ", "), nil
}
