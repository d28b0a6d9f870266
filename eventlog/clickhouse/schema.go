package clickhouse

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// The schema: numbered .sql files, applied in order, each recorded in the
// schema_migrations table. Files are append-only: never edit a released one, add
// the next number instead. (Once, files 5, 6, 10 and 11 were edited in place: each
// subquery they join got an alias, which current ClickHouse releases require
// (joined_subquery_requires_alias) and 18.16 accepts. No current server could
// apply them before, and a database that has them keeps its views, which mean the
// same.) deploy/clickhouse-compat.sh runs every file on a current release.
// Every statement is idempotent (CREATE … IF NOT EXISTS,
// DROP … IF EXISTS of a view a later CREATE replaces, INSERT … SELECT of
// aggregate states that count distinct values), so applying a file twice, as two
// nodes starting at once may, is harmless.
// ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS, so migrate skips an "ALTER TABLE t
// ADD COLUMN c …" whose column exists instead (addsColumn).
//
//go:embed schema/*.sql
var schemaFS embed.FS

// SchemaVersion is the schema version this build writes: the number of the last
// file in schema/.
const SchemaVersion = 18

// Migration is one numbered schema file.
type Migration struct {
	Version    int
	Name       string   // file name, such as "0002_events.sql"
	Statements []string // in order, without the trailing semicolons
}

// Migrations returns the embedded schema files in version order, for tools that
// apply or show the schema themselves.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(schemaFS, "schema")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("schema file %s: name does not start with a version number", e.Name())
		}
		b, err := fs.ReadFile(schemaFS, path.Join("schema", e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: e.Name(), Statements: splitStatements(string(b))})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("schema file %s: version %d, want %d (versions are 1, 2, 3, … without gaps)", m.Name, m.Version, i+1)
		}
		if len(m.Statements) == 0 {
			return nil, fmt.Errorf("schema file %s has no statements", m.Name)
		}
	}
	return ms, nil
}

// splitStatements splits a schema file into statements: whole-line "--" comments
// are dropped, and a statement ends with a semicolon at the end of a line.
func splitStatements(sql string) []string {
	var (
		stmts []string
		cur   strings.Builder
	)
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			stmts = append(stmts, s)
		}
		cur.Reset()
	}
	for line := range strings.SplitSeq(sql, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--") {
			continue
		}
		if strings.HasSuffix(trimmed, ";") {
			cur.WriteString(strings.TrimSuffix(strings.TrimRight(line, " \t\r"), ";"))
			flush()
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	flush()
	return stmts
}

// migrate brings the database that conn uses to SchemaVersion. It refuses a
// database that records a version this build does not know.
func migrate(ctx context.Context, conn driver.Conn, database string) error {
	ms, err := Migrations()
	if err != nil {
		return permanent(fmt.Errorf("eventlog/clickhouse: embedded schema: %w", err))
	}
	if len(ms) != SchemaVersion {
		return permanent(fmt.Errorf("eventlog/clickhouse: embedded schema has %d files, SchemaVersion is %d", len(ms), SchemaVersion))
	}
	// The first file creates schema_migrations itself: apply it before reading it.
	if err := apply(ctx, conn, ms[0]); err != nil {
		return fmt.Errorf("eventlog/clickhouse: database %s: %w", database, err)
	}
	applied, err := appliedVersions(ctx, conn)
	if err != nil {
		return fmt.Errorf("eventlog/clickhouse: database %s: read schema_migrations: %w", database, err)
	}
	if n := len(applied); n > 0 && applied[n-1] > SchemaVersion {
		return permanent(fmt.Errorf("eventlog/clickhouse: database %s has schema version %d, this build knows up to %d: run a newer build",
			database, applied[n-1], SchemaVersion))
	}
	for _, m := range ms {
		if slices.Contains(applied, m.Version) {
			continue
		}
		if m.Version > 1 {
			if err := apply(ctx, conn, m); err != nil {
				return fmt.Errorf("eventlog/clickhouse: database %s: %w", database, err)
			}
		}
		if err := record(ctx, conn, m); err != nil {
			return fmt.Errorf("eventlog/clickhouse: database %s: record %s: %w", database, m.Name, err)
		}
	}
	return nil
}

func apply(ctx context.Context, conn driver.Conn, m Migration) error {
	for i, stmt := range m.Statements {
		table, col, adds := addsColumn(stmt)
		if adds {
			if has, err := hasColumn(ctx, conn, table, col); err != nil {
				return fmt.Errorf("apply %s, statement %d: %w", m.Name, i+1, err)
			} else if has {
				continue // added before, or by a node migrating at the same time
			}
		}
		if err := conn.Exec(ctx, stmt); err != nil {
			if adds {
				if has, herr := hasColumn(ctx, conn, table, col); herr == nil && has {
					continue // another node added it meanwhile
				}
			}
			return fmt.Errorf("apply %s, statement %d: %w", m.Name, i+1, err)
		}
	}
	return nil
}

// addColumnPattern matches the statements that add a column: ClickHouse 18.16 has
// no ADD COLUMN IF NOT EXISTS, so migrate checks for the column itself.
var addColumnPattern = regexp.MustCompile(`^(?i:ALTER\s+TABLE)\s+(\w+)\s+(?i:ADD\s+COLUMN)\s+(\w+)\s`)

// addsColumn reports the table and column of an ALTER TABLE … ADD COLUMN statement.
func addsColumn(stmt string) (table, column string, ok bool) {
	m := addColumnPattern.FindStringSubmatch(stmt)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// hasColumn reports whether table of the connection's database has column.
func hasColumn(ctx context.Context, conn driver.Conn, table, column string) (bool, error) {
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = currentDatabase() AND table = ? AND name = ?",
		table, column).Scan(&n); err != nil {
		return false, fmt.Errorf("look up column %s.%s: %w", table, column, err)
	}
	return n > 0, nil
}

func appliedVersions(ctx context.Context, conn driver.Conn) ([]int, error) {
	rows, err := conn.Query(ctx, "SELECT DISTINCT version FROM schema_migrations ORDER BY version")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		vs = append(vs, int(v))
	}
	return vs, rows.Err()
}

// record notes that m is applied. Inserts go through PrepareBatch with a column
// list: Exec of INSERT … VALUES hangs against ClickHouse 18.16.
func record(ctx context.Context, conn driver.Conn, m Migration) error {
	b, err := conn.PrepareBatch(ctx, "INSERT INTO schema_migrations (version, name, applied_us)")
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	if err := b.Append(uint32(m.Version), m.Name, time.Now().UnixMicro()); err != nil {
		return err
	}
	return b.Send()
}

// ErrNoLog means that Open with Config.MustExist found no event log: the database
// does not exist, or it holds no schema_migrations table.
var ErrNoLog = errors.New("eventlog/clickhouse: no event log")

// createDatabase creates the database, if it is missing, on a connection that
// does not use it yet. With mustExist it creates nothing: it returns ErrNoLog
// (permanent) when the database is missing or holds no event log.
func createDatabase(ctx context.Context, opts *ch.Options, database string, mustExist bool) error {
	o := *opts
	o.Auth.Database = ""
	o.MaxOpenConns, o.MaxIdleConns = 1, 1
	conn, err := ch.Open(&o)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if mustExist {
		return checkDatabase(ctx, conn, database, strings.Join(opts.Addr, ","))
	}
	return ensureDatabase(ctx, conn, database)
}

// ensureDatabase creates the database on conn unless it exists. It looks first, so
// that a user who may not create databases can use an existing one.
func ensureDatabase(ctx context.Context, conn driver.Conn, database string) error {
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.databases WHERE name = ?", database).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	return conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+database)
}

// checkDatabase returns ErrNoLog, marked permanent, unless database exists on conn
// and holds the schema_migrations table that every log's first migration creates.
// where names the servers in the error.
func checkDatabase(ctx context.Context, conn driver.Conn, database, where string) error {
	var dbs, tables uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.databases WHERE name = ?", database).Scan(&dbs); err != nil {
		return err
	}
	if dbs == 0 {
		return permanent(fmt.Errorf("%w: database %q does not exist on %s", ErrNoLog, database, where))
	}
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = 'schema_migrations'", database).Scan(&tables); err != nil {
		return err
	}
	if tables == 0 {
		return permanent(fmt.Errorf("%w: database %q on %s holds no event log (it has no schema_migrations table)", ErrNoLog, database, where))
	}
	return nil
}
