package sqlite

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSummaryOfPlainBatchWritesNoIndex: the summary update of a batch without
// task.* events (most of an agent's) changes the session's row only: SQLite's
// program for it opens the table alone for writing (a WITHOUT ROWID table is one
// b-tree), and no index (neither sessions_by_start, nor sessions_running, whose
// condition names the status and task counts).
func TestSummaryOfPlainBatchWritesNoIndex(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l := openTemp(ctx, t)
	for _, c := range []struct {
		query  string
		btrees int
	}{{touchQuery, 1}, {"UPDATE sessions SET status = ?, tasks = tasks + ? WHERE session_id = ?", 2}} {
		ops := explainOps(ctx, t, l, c.query)
		if got := strings.Count(ops, "OpenWrite"); got != c.btrees {
			t.Errorf("%s: opens %d b-trees for writing, want %d; program: %s", c.query, got, c.btrees, ops)
		}
	}
}

// explainOps returns the opcodes of SQLite's program for query, space-separated.
func explainOps(ctx context.Context, t *testing.T, l *Log, query string) string {
	t.Helper()
	args := make([]any, strings.Count(query, "?")) // NULLs: the driver binds every parameter
	rows, err := l.rdb.QueryContext(ctx, "EXPLAIN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for rows.Next() {
		vals := make([]any, len(cols))
		for i := range vals {
			vals[i] = new(any)
		}
		if err := rows.Scan(vals...); err != nil {
			t.Fatal(err)
		}
		op, _ := (*vals[1].(*any)).(string)
		ops = append(ops, op)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(ops, " ")
}
