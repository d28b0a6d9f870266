package clickhouse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/ext"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// The compatibility dump: TestDumpStatements drives the Log over a recording
// driver.Conn (recorder) that answers each query with rows the test gives it, and
// writes every statement the Log sent, in order, with its arguments bound as
// ClickHouse literals, to the JSON file TROUPE_CH_COMPAT_DUMP names.
// deploy/clickhouse-compat.sh runs them on a current ClickHouse (chdb); CI runs the
// package's own tests on ClickHouse 18.16.

// compatDatabase is the database the dumped statements create and use.
const compatDatabase = "troupe_compat"

// dumpedStatement is one statement of the dump. Tables are the external tables
// sent with it (the runner creates them, with their rows, before the statement and
// drops them after). Rows, if set, is the number of rows the query returns on a
// server that ran the statements before it: the events that the dump appended are
// in the tables, so a read, a listing or a report returns what a reader of those
// events expects.
type dumpedStatement struct {
	Step   string        `json:"step"`
	SQL    string        `json:"sql"`
	Tables []dumpedTable `json:"tables,omitempty"`
	Rows   *int          `json:"rows,omitempty"`
}

type dumpedTable struct {
	Name      string   `json:"name"`
	Structure string   `json:"structure"`
	Rows      []string `json:"rows"` // each a tuple of literals: "('a', 1)"
}

type compatDump struct {
	Database   string            `json:"database"`
	Statements []dumpedStatement `json:"statements"`
}

// recorder is a driver.Conn that records the statements sent to it. A query is
// answered with the rows of the first answer whose key the query contains (none
// by default); QueryRow without rows scans zeros.
type recorder struct {
	mu      sync.Mutex
	step    string
	stmts   []dumpedStatement
	answers []answer
	expects []expect
	tables  []*ext.Table // for the next Query (Log.externalTables)
	err     error        // the first statement that could not be rendered
}

type answer struct {
	key  string
	rows [][]any
}

// expect says how many rows the first query of a step that contains key returns
// on the server (dumpedStatement.Rows).
type expect struct {
	key  string
	rows int
}

var _ driver.Conn = (*recorder)(nil)

// at names the step of the statements that follow, and sets the answers of its queries.
func (r *recorder) at(step string, answers ...answer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.expects {
		if r.err == nil {
			r.err = fmt.Errorf("step %s: no query contained %q", r.step, e.key)
		}
	}
	r.step, r.answers, r.expects = step, answers, nil
}

// expect sets the number of rows the first query of the step that contains key
// returns on the server.
func (r *recorder) expect(key string, rows int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expects = append(r.expects, expect{key, rows})
}

func (r *recorder) record(sql string, args []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	bound, err := bindLiterals(sql, args)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("step %s: %w", r.step, err)
	}
	s := dumpedStatement{Step: r.step, SQL: bound}
	for i, e := range r.expects {
		if strings.Contains(sql, e.key) {
			s.Rows = &e.rows
			r.expects = slices.Delete(r.expects, i, i+1)
			break
		}
	}
	for _, t := range r.tables {
		dt, err := dumpTable(t)
		if err != nil && r.err == nil {
			r.err = fmt.Errorf("step %s: %w", r.step, err)
		}
		s.Tables = append(s.Tables, dt)
	}
	r.tables = nil
	r.stmts = append(r.stmts, s)
}

func (r *recorder) rowsFor(sql string) [][]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.answers {
		if strings.Contains(sql, a.key) {
			return a.rows
		}
	}
	return nil
}

func (r *recorder) externalTables(tables []*ext.Table) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tables = tables
}

func (r *recorder) Query(_ context.Context, query string, args ...any) (driver.Rows, error) {
	r.record(query, args)
	return &fakeRows{rows: r.rowsFor(query), at: -1}, nil
}

func (r *recorder) QueryRow(_ context.Context, query string, args ...any) driver.Row {
	r.record(query, args)
	return &fakeRow{rows: r.rowsFor(query)}
}

func (r *recorder) Exec(_ context.Context, query string, args ...any) error {
	r.record(query, args)
	return nil
}

func (r *recorder) PrepareBatch(_ context.Context, query string, _ ...driver.PrepareBatchOption) (driver.Batch, error) {
	return &fakeBatch{r: r, query: query}, nil
}

func (r *recorder) Select(context.Context, any, string, ...any) error {
	return errors.New("recorder: Select is not recorded")
}
func (r *recorder) QueryFormat(context.Context, string, string, ...any) (io.ReadCloser, error) {
	return nil, errors.New("recorder: QueryFormat is not recorded")
}
func (r *recorder) InsertFormat(context.Context, string, string, io.Reader) error {
	return errors.New("recorder: InsertFormat is not recorded")
}
func (r *recorder) AsyncInsert(context.Context, string, bool, ...any) error {
	return errors.New("recorder: AsyncInsert is not recorded")
}
func (r *recorder) Contributors() []string { return nil }
func (r *recorder) ServerVersion() (*driver.ServerVersion, error) {
	return &driver.ServerVersion{}, nil
}
func (r *recorder) Ping(context.Context) error { return nil }
func (r *recorder) Stats() driver.Stats        { return driver.Stats{} }
func (r *recorder) Close() error               { return nil }

// scanInto sets dest (pointers) to the values of row, converted.
func scanInto(row []any, dest []any) error {
	if len(row) != len(dest) {
		return fmt.Errorf("recorder: answer has %d columns, the query scans %d", len(row), len(dest))
	}
	for i, v := range row {
		d := reflect.ValueOf(dest[i]).Elem()
		d.Set(reflect.ValueOf(v).Convert(d.Type()))
	}
	return nil
}

type fakeRows struct {
	rows [][]any
	at   int
}

func (f *fakeRows) Next() bool                       { f.at++; return f.at < len(f.rows) }
func (f *fakeRows) Scan(dest ...any) error           { return scanInto(f.rows[f.at], dest) }
func (f *fakeRows) ScanStruct(any) error             { return errors.New("recorder: ScanStruct") }
func (f *fakeRows) ColumnTypes() []driver.ColumnType { return nil }
func (f *fakeRows) Totals(...any) error              { return nil }
func (f *fakeRows) Columns() []string                { return nil }
func (f *fakeRows) Close() error                     { return nil }
func (f *fakeRows) Err() error                       { return nil }
func (f *fakeRows) HasData() bool                    { return len(f.rows) > 0 }

type fakeRow struct{ rows [][]any }

func (f *fakeRow) Err() error           { return nil }
func (f *fakeRow) ScanStruct(any) error { return errors.New("recorder: ScanStruct") }
func (f *fakeRow) Scan(dest ...any) error {
	if len(f.rows) == 0 {
		return nil // zeros
	}
	return scanInto(f.rows[0], dest)
}

// fakeBatch records its INSERT, with its rows as VALUES, when it is sent.
type fakeBatch struct {
	r     *recorder
	query string
	rows  [][]any
	cols  map[int]any // Column(i).Append: a slice per column
	sent  bool
}

func (b *fakeBatch) Append(v ...any) error { b.rows = append(b.rows, v); return nil }
func (b *fakeBatch) AppendStruct(any) error {
	return errors.New("recorder: AppendStruct")
}
func (b *fakeBatch) Column(i int) driver.BatchColumn { return batchColumn{b, i} }
func (b *fakeBatch) Flush() error                    { return nil }
func (b *fakeBatch) Abort() error                    { b.sent = true; return nil }
func (b *fakeBatch) IsSent() bool                    { return b.sent }
func (b *fakeBatch) Rows() int                       { return len(b.rows) }
func (b *fakeBatch) Columns() []column.Interface     { return nil }
func (b *fakeBatch) Close() error                    { return nil }

func (b *fakeBatch) Send() error {
	b.sent = true
	rows := b.rows
	if len(b.cols) > 0 {
		n := reflect.ValueOf(b.cols[0]).Len()
		for j := range n {
			row := make([]any, len(b.cols))
			for i := range b.cols {
				row[i] = reflect.ValueOf(b.cols[i]).Index(j).Interface()
			}
			rows = append(rows, row)
		}
	}
	tuples := make([]string, len(rows))
	for j, row := range rows {
		t, err := tuple(row)
		if err != nil {
			return err
		}
		tuples[j] = t
	}
	b.r.record(b.query+" VALUES "+strings.Join(tuples, ", "), nil)
	return nil
}

type batchColumn struct {
	b *fakeBatch
	i int
}

func (c batchColumn) Append(v any) error {
	if c.b.cols == nil {
		c.b.cols = map[int]any{}
	}
	c.b.cols[c.i] = v
	return nil
}
func (c batchColumn) AppendRow(any) error { return errors.New("recorder: AppendRow") }

// literal renders v as a ClickHouse literal. Strings are quoted with their
// quotes and backslashes escaped, and every byte outside printable ASCII written
// as \xHH, so that the statement is valid UTF-8 (JSON) and means the same bytes.
func literal(v any) (string, error) {
	switch v := v.(type) {
	case string:
		var b strings.Builder
		b.WriteByte('\'')
		for i := 0; i < len(v); i++ {
			switch c := v[i]; {
			case c == '\'' || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c < 0x20 || c >= 0x7f:
				fmt.Fprintf(&b, "\\x%02X", c)
			default:
				b.WriteByte(c)
			}
		}
		b.WriteByte('\'')
		return b.String(), nil
	case []byte:
		return literal(string(v))
	case int:
		return strconv.Itoa(v), nil
	case int8, int16, int32, int64:
		return strconv.FormatInt(reflect.ValueOf(v).Int(), 10), nil
	case uint8, uint16, uint32, uint64:
		return strconv.FormatUint(reflect.ValueOf(v).Uint(), 10), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case bool:
		if v {
			return "1", nil
		}
		return "0", nil
	}
	return "", fmt.Errorf("no literal for %T %v", v, v)
}

func tuple(row []any) (string, error) {
	parts := make([]string, len(row))
	for i, v := range row {
		l, err := literal(v)
		if err != nil {
			return "", err
		}
		parts[i] = l
	}
	return "(" + strings.Join(parts, ", ") + ")", nil
}

// bindLiterals replaces each ? of query outside quotes by the literal of the next
// argument, as the client binds positional parameters.
func bindLiterals(query string, args []any) (string, error) {
	var (
		b     strings.Builder
		n     int
		quote byte
	)
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == '\\' && i+1 < len(query) {
				b.WriteByte(c)
				i++
				c = query[i]
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '`' || c == '"':
			quote = c
		case c == '?':
			if n == len(args) {
				return "", fmt.Errorf("query has more ? than its %d arguments: %s", len(args), query)
			}
			l, err := literal(args[n])
			if err != nil {
				return "", err
			}
			b.WriteString(l)
			n++
			continue
		}
		b.WriteByte(c)
	}
	if n != len(args) {
		return "", fmt.Errorf("query has %d ?, and %d arguments: %s", n, len(args), query)
	}
	return b.String(), nil
}

// dumpTable renders an external table's rows as tuples of literals.
func dumpTable(t *ext.Table) (dumpedTable, error) {
	d := dumpedTable{Name: t.Name(), Structure: t.Structure()}
	block := t.Block()
	for j := range block.Rows() {
		row := make([]any, len(block.Columns))
		for i, c := range block.Columns {
			row[i] = c.Row(j, false)
		}
		tp, err := tuple(row)
		if err != nil {
			return d, err
		}
		d.Rows = append(d.Rows, tp)
	}
	return d, nil
}

func TestLiteral(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{"plain", `'plain'`},
		{`it's a \ back`, `'it\'s a \\ back'`},
		{"tab\tnew\nline", `'tab\x09new\x0Aline'`},
		{"bus0\xff", `'bus0\xFF'`},
		{"é", `'\xC3\xA9'`},
		{int64(-3), "-3"},
		{uint64(math.MaxUint64), "18446744073709551615"},
		{uint32(7), "7"},
		{int8(-1), "-1"},
	} {
		if got, err := literal(c.v); err != nil || got != c.want {
			t.Errorf("literal(%#v) = %s, %v; want %s", c.v, got, err, c.want)
		}
	}
	got, err := bindLiterals(`SELECT '?', "a?" FROM t WHERE a = ? AND b IN (?, ?) AND c = 'x\'?'`, []any{"o'k", 1, uint64(2)})
	if want := `SELECT '?', "a?" FROM t WHERE a = 'o\'k' AND b IN (1, 2) AND c = 'x\'?'`; err != nil || got != want {
		t.Errorf("bindLiterals = %s, %v; want %s", got, err, want)
	}
	if _, err := bindLiterals("SELECT ?", nil); err == nil {
		t.Error("bindLiterals bound a ? without an argument")
	}
	if _, err := bindLiterals("SELECT 1", []any{1}); err == nil {
		t.Error("bindLiterals ignored an argument")
	}
}

// TestDumpStatements writes the statements the Log sends, for
// deploy/clickhouse-compat.sh: creating the database, the migrations from an
// empty database (twice: a second node migrating at the same time applies them
// again and skips the columns that exist), then each operation of the Log, with
// arguments that reach every query (a quote and a backslash in a session ID
// among them).
func TestDumpStatements(t *testing.T) {
	out := os.Getenv("TROUPE_CH_COMPAT_DUMP")
	if out == "" {
		t.Skip("TROUPE_CH_COMPAT_DUMP is not set (deploy/clickhouse-compat.sh sets it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := &recorder{}

	r.at("create database")
	if err := ensureDatabase(ctx, r, compatDatabase); err != nil {
		t.Fatal(err)
	}
	r.at("migrate")
	if err := migrate(ctx, r, compatDatabase); err != nil {
		t.Fatal(err)
	}
	r.at("migrate again, as a second node at the same time", answer{"FROM system.columns", [][]any{{1}}})
	if err := migrate(ctx, r, compatDatabase); err != nil {
		t.Fatal(err)
	}

	cfg := Config{Database: compatDatabase, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}.WithDefaults()
	l := start(cfg, r)
	l.externalTables = r.externalTables // before the first Append: the writer reads it
	defer func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	}()

	const node = "node-a"
	r.at("own", answer{"SELECT max(epoch) FROM ownership", [][]any{{0}}})
	epoch, err := l.Own(ctx, node, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	sid, child := `s'1\`, "child"
	submitted := func(session string, seq uint64, parent string) messages.Envelope {
		p := &messages.TaskSubmitted{Input: "What is 12 * (7 + 5)?", Agent: "math"}
		if parent != "" {
			p.Parent = &messages.ParentRef{SessionID: parent, Key: "k", Depth: 1}
		}
		e := sessionEvent(t, seq, "", p)
		e.SessionID, e.ID = session, fmt.Sprintf("%s/%d", session, seq)
		return e
	}
	ev := func(session string, seq uint64, task string, p messages.Payload) messages.Envelope {
		e := sessionEvent(t, seq, task, p)
		e.SessionID, e.ID = session, fmt.Sprintf("%s/%d", session, seq)
		return e
	}
	current := answer{"max(epoch) FROM ownership", [][]any{{0, epoch}}}
	lookupCurrent := answer{"SELECT 1 AS src", [][]any{{4, "", 0, "", epoch}}}

	r.at("append")
	if err := l.Append(ctx, []messages.Envelope{submitted(child, 1, sid)}); err != nil {
		t.Fatal(err)
	}
	r.at("claim leased", lookupCurrent, current)
	if err := l.ClaimLeased(ctx, eventlog.Lease{Partition: 0, Epoch: epoch}, []messages.Envelope{submitted(sid, 1, "")}); err != nil {
		t.Fatal(err)
	}
	r.at("append leased", lookupCurrent, current)
	task := sid + "/1"
	leased := []messages.Envelope{
		ev(sid, 2, task, &messages.ModelRequested{Key: "m2", Model: "offline", Step: 1, Messages: 2}),
		ev(sid, 3, task, &messages.ModelResponded{Key: "m2", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "it's 144"}, LatencyUS: 812}),
		ev(sid, 4, task, &messages.ToolCallCompleted{Key: "k", CallID: "call_1", Tool: "calculator", Result: `"144"\n`, LatencyUS: 35}),
		ev(sid, 5, task, &messages.TaskCompleted{Output: "144", Steps: 1}),
	}
	leased[1].ID = "reply-1" // not canonical: listed in event_ids
	if err := l.AppendLeased(ctx, eventlog.Lease{Partition: 0, Epoch: epoch}, leased); err != nil {
		t.Fatal(err)
	}
	r.at("claim")
	if err := l.Claim(ctx, []messages.Envelope{submitted("s2", 1, "")}); err != nil {
		t.Fatal(err)
	}

	// What the server returns for the events appended above: sessions child (a
	// task submitted), s'1\ (a task submitted, a model call, a tool call, the
	// task completed) and s2 (a task submitted), each task of agent math.
	r.at("read")
	r.expect("AND seq >= ", 5)
	if _, err := l.Read(ctx, sid, 1); err != nil {
		t.Fatal(err)
	}
	r.at("read from a seq")
	r.expect("AND seq < ", 1)
	r.expect("AND seq >= ", 3)
	if _, err := l.Read(ctx, sid, 3); err != nil {
		t.Fatal(err)
	}
	r.at("read a page")
	r.expect("AND seq < ", 1)
	r.expect("AND seq >= ", 2) // the window of seqs 2 and 3
	if _, err := l.ReadN(ctx, sid, 2, 2, 0); err != nil {
		t.Fatal(err)
	}
	r.at("read a page bounded by bytes")
	r.expect("AND seq >= ", 5) // the window reaches the session's end short of the bound
	if _, err := l.ReadN(ctx, sid, 1, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	r.at("read a page that its first event fills")
	r.expect("AND seq >= ", 1) // the window ends at the row that reaches the bound
	if _, err := l.ReadN(ctx, sid, 1, 0, 1); err != nil {
		t.Fatal(err)
	}
	r.at("find an event") // by an ID that names no position: looked up in event_ids
	if _, _, err := l.FindEvent(ctx, sid, "reply-1"); err != nil {
		t.Fatal(err)
	}

	r.at("sessions")
	r.expect("ORDER BY first_us", 3)
	if _, err := l.Sessions(ctx, eventlog.Filter{}); err != nil {
		t.Fatal(err)
	}
	r.at("sessions filtered")
	r.expect("ORDER BY first_us", 1)
	if _, err := l.Sessions(ctx, eventlog.Filter{SinceUS: 1, UpdatedSinceUS: 2, Prefix: `s'`, SessionsOnly: true, Status: messages.StatusCompleted, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	r.at("sessions of an agent")
	r.expect("ORDER BY first_us", 3) // each session's first task names math
	if _, err := l.Sessions(ctx, eventlog.Filter{Agent: "math"}); err != nil {
		t.Fatal(err)
	}
	r.at("sessions of an agent, filtered")
	r.expect("ORDER BY first_us", 0)
	if _, err := l.Sessions(ctx, eventlog.Filter{Agent: `ma'th\`, SinceUS: 1, Status: messages.StatusCompleted, Limit: 2}); err != nil {
		t.Fatal(err)
	}
	r.at("sessions running")
	r.expect("ORDER BY first_us", 2) // s'1\ ended
	if _, err := l.Sessions(ctx, eventlog.Filter{Status: messages.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	// The running sessions: one listed in fenced_events (its status read from its
	// events: ended), one ended (its ends read), both closed in open_tasks.
	r.at("sessions running, listing",
		answer{"FROM session_summaries", [][]any{
			{sid, 5, 1, 5, "task.completed", 1, 5, 1, 1, "", 1},
			{"s2", 1, 0, 1, "task.completed", 1, 1, 1, 1, "", 0},
		}},
		answer{"if(type IN ('task.submitted'", [][]any{
			{sid, 1, epoch, "task.submitted", task, 0},
			{sid, 5, epoch, "task.completed", task, 0},
		}},
		answer{"FROM open_tasks WHERE", [][]any{{"s2", "", 1}, {sid, task, 1}}},
	)
	r.expect("ORDER BY first_us", 3) // the candidates: each has a task's row +1 in open_tasks
	r.expect("if(type IN ('task.submitted'", 5)
	r.expect("FROM open_tasks WHERE", 1) // s2's task; s'1\'s ended
	if _, err := l.Sessions(ctx, eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true, Limit: 5}); err != nil {
		t.Fatal(err)
	}

	r.at("report")
	r.expect("'model.responded'", 1)
	r.expect("'tool.completed'", 1)
	r.expect("AS steps", 1) // agent math's sessions
	r.expect("'memory.%'", 0)
	if _, err := l.Report(ctx, eventlog.StatsFilter{SinceUS: 1}); err != nil {
		t.Fatal(err)
	}
	r.at("report of an agent")
	r.expect("'model.responded'", 0)
	r.expect("'tool.completed'", 0)
	r.expect("AS steps", 0)
	if _, err := l.Report(ctx, eventlog.StatsFilter{SinceUS: 1, Agent: "ma'th"}); err != nil {
		t.Fatal(err)
	}

	r.at("mark published", answer{"argMax(node, epoch) FROM ownership", [][]any{{0, epoch, node}}})
	if err := l.MarkPublished(ctx, node, epoch, []int{0}, 1_767_225_650_000_000); err != nil {
		t.Fatal(err)
	}
	r.at("release", answer{"argMax(node, epoch) FROM ownership", [][]any{{0, epoch, node}}})
	if err := l.Release(ctx, node, epoch, []int{0}, 1_767_225_700_000_000); err != nil {
		t.Fatal(err)
	}
	r.at("owners")
	r.expect("argMax(node, epoch)", 2)
	r.expect("FROM releases", 1)
	r.expect("FROM published_marks", 1)
	if _, err := l.Owners(ctx, []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	r.at("current epoch")
	r.expect("SELECT partition, max(epoch) FROM ownership", 1)
	if _, err := l.CurrentEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r.at("own again", answer{"SELECT max(epoch) FROM ownership", [][]any{{epoch}}})
	if _, err := l.Own(ctx, "node-b", []int{1}); err != nil {
		t.Fatal(err)
	}
	// Partition 0 from node-a (released, marked), 1 from node-b.
	r.at("take over", answer{"SELECT max(epoch) FROM ownership", [][]any{{epoch + 1}}})
	r.expect("argMax(node, epoch)", 2)
	r.expect("FROM releases", 1)
	r.expect("FROM published_marks", 1)
	if _, _, err := l.TakeOver(ctx, "node-c", []int{0, 1}); err != nil {
		t.Fatal(err)
	}

	r.at("prune bus streams", answer{"GROUP BY session_id HAVING max(ts)", [][]any{{eventlog.BusStreamPrefix + "x"}}})
	if _, err := l.PruneBusStreams(ctx, 1_767_225_700_000_000, 100); err != nil {
		t.Fatal(err)
	}
	r.at("prune listed streams", answer{"SELECT session_id, max(ts) FROM events", [][]any{{"mcp/session/a'b", 1}}})
	if _, err := l.PruneListed(ctx, []eventlog.StreamBound{{ID: "mcp/session/a'b", BeforeUS: 1_767_225_700_000_000}, {ID: "a2a/push/t1", BeforeUS: 1}}); err != nil {
		t.Fatal(err)
	}

	r.at("delete events", answer{"SELECT DISTINCT seq FROM events", [][]any{{uint64(1)}, {uint64(2)}, {uint64(3)}}})
	if n, err := l.DeleteEvents(ctx, eventlog.KnowledgeStreamPrefix+"docs'x", []uint64{1, 2}); err != nil || n != 2 {
		t.Fatalf("DeleteEvents: %d, %v", n, err)
	}

	// Open's repair of the summaries a compaction left stale (a process killed
	// mid-compaction), in the background at Open; here, with one stale stream.
	r.at("repair summaries", answer{"ANY LEFT JOIN", [][]any{{eventlog.KnowledgeStreamPrefix + "docs'x"}}})
	l.repairSummaries(ctx)

	// Fold snapshots: two saves of one session (the latest saved is read), and the
	// read of a session's latest, its state bytes of any value.
	for i, seq := range []uint64{5, 4} {
		r.at(fmt.Sprintf("save snapshot %d", i+1))
		if err := l.SaveSnapshot(ctx, eventlog.FoldSnapshot{SessionID: sid, Seq: seq, EventID: fmt.Sprintf("%s/%d", sid, seq), EventSum: "e'1",
			Rules: 10, Codec: "1/abc/def", Agents: "a\\b", State: []byte("st\x00a'te\xff"), Sum: "c"}); err != nil {
			t.Fatal(err)
		}
	}
	r.at("load snapshot")
	r.expect("FROM fold_snapshots", 1)
	if _, _, err := l.LoadSnapshot(ctx, sid); err != nil {
		t.Fatal(err)
	}

	// Writable sends nothing while writes go through; once one failed, its probe.
	r.at("writable")
	if err := l.Writable(ctx); err != nil {
		t.Fatal(err)
	}
	outage := errors.New("an attempt of the writer failed")
	l.failing.Store(&writeFailure{since: time.Now(), cause: outage, err: outage})
	if err := l.Writable(ctx); err != nil {
		t.Fatal(err)
	}

	r.at("")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		t.Fatal(r.err)
	}
	// Every step sent something: a step that sends nothing dumps nothing to check.
	steps := map[string]bool{}
	for _, s := range r.stmts {
		steps[s.Step] = true
	}
	for _, want := range []string{"create database", "migrate", "own", "append", "claim leased", "append leased", "claim", "read",
		"read from a seq", "sessions", "sessions filtered", "sessions running", "sessions running, listing", "report", "report of an agent", "release",
		"owners", "own again", "take over", "prune bus streams", "prune listed streams", "delete events", "writable"} {
		if !steps[want] {
			t.Errorf("step %q sent no statement", want)
		}
	}
	b, err := json.MarshalIndent(compatDump{Database: compatDatabase, Statements: r.stmts}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d statements written to %s", len(r.stmts), out)
}

// TestDumpCallsEveryMethod keeps TestDumpStatements whole: every exported method
// of Log is called by it, so that the statements of a method added later reach
// the compatibility check of current ClickHouse (deploy/clickhouse-compat.sh),
// or the method is named here as running no statement of its own.
func TestDumpCallsEveryMethod(t *testing.T) {
	noStatements := map[string]string{
		"Stats":              "reads counters",
		"PruneStreams":       "PruneBusStreams runs its statements",
		"CompactMin":         "reads the configuration",
		"SeqRacesUndetected": "answers a constant",
	}
	src, err := os.ReadFile("compat_internal_test.go")
	if err != nil {
		t.Fatal(err)
	}
	body := string(src)
	start := strings.Index(body, "func TestDumpStatements(")
	if start < 0 {
		t.Fatal("no TestDumpStatements")
	}
	body = body[start:]
	if end := strings.Index(body, "\n}\n"); end >= 0 {
		body = body[:end]
	}
	typ := reflect.TypeFor[*Log]()
	for i := range typ.NumMethod() {
		name := typ.Method(i).Name
		if _, ok := noStatements[name]; ok {
			continue
		}
		if !strings.Contains(body, "l."+name+"(") {
			t.Errorf("TestDumpStatements does not call Log.%s: add its statements to the dump (or name it in noStatements if it runs none)", name)
		}
	}
}
