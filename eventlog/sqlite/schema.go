package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/eventlog"
)

// migrations[i] moves the schema from version i to i+1; PRAGMA user_version holds
// the version reached. Migrations are append-only: never edit a released one.
var migrations = [][]string{
	// 1: events, and a per-session summary kept in the same transaction as the events
	// so that listing sessions reads one row per session. Every page a commit touches
	// costs a WAL frame, so the hot path touches few: the events row and its two
	// indexes, and one sessions row (WITHOUT ROWID: small rows, keyed by session),
	// whose started_us, and so sessions_by_start, changes only when an earlier event
	// of the session arrives late.
	{
		`CREATE TABLE events (
			session_id     TEXT    NOT NULL,
			seq            INTEGER NOT NULL,
			id             TEXT    NOT NULL UNIQUE,
			type           TEXT    NOT NULL,
			version        INTEGER NOT NULL,
			causation_id   TEXT    NOT NULL,
			correlation_id TEXT    NOT NULL,
			ts             INTEGER NOT NULL,
			actor          TEXT    NOT NULL,
			payload        BLOB    NOT NULL,
			PRIMARY KEY (session_id, seq)
		)`,
		`CREATE TABLE sessions (
			session_id TEXT    NOT NULL PRIMARY KEY,
			status     TEXT    NOT NULL,
			status_seq INTEGER NOT NULL, -- seq of the task.* event that set status, 0 if none
			events     INTEGER NOT NULL,
			steps      INTEGER NOT NULL,
			last_seq   INTEGER NOT NULL,
			started_us INTEGER NOT NULL,
			updated_us INTEGER NOT NULL
		) WITHOUT ROWID`,
		`CREATE INDEX sessions_by_start ON sessions (started_us DESC, session_id)`,
	},
	// 2: the number of tasks a session was given (task.submitted events) and of those
	// that ended (task.completed and task.failed), so that a session with tasks queued
	// behind an ended one lists as running (see eventlog.SessionStatus and
	// sessionStatus), counted from the stored events. No comment inside ADD COLUMN:
	// SQLite splices the text into the table's CREATE statement.
	{
		`ALTER TABLE sessions ADD COLUMN tasks INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE sessions ADD COLUMN ended INTEGER NOT NULL DEFAULT 0`,
		`UPDATE sessions SET
			tasks = (SELECT count(*) FROM events e WHERE e.session_id = sessions.session_id AND e.type = 'task.submitted'),
			ended = (SELECT count(*) FROM events e WHERE e.session_id = sessions.session_id AND e.type IN ('task.completed', 'task.failed'))`,
	},
	// 3: fencing of stale partition owners (eventlog.Fencing). Each event keeps the
	// ownership epoch it was appended under (0: Append without a lease, and every
	// event written before this version); ownership records, per partition of
	// troupe.tasks, the epochs Own took, the highest being the current one.
	{
		`ALTER TABLE events ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0`,
		`CREATE TABLE ownership (
			partition INTEGER NOT NULL,
			epoch     INTEGER NOT NULL,
			node      TEXT    NOT NULL,
			ts_us     INTEGER NOT NULL,
			PRIMARY KEY (partition, epoch)
		) WITHOUT ROWID`,
		`CREATE INDEX ownership_by_epoch ON ownership (epoch)`,
	},
	// 4: Read starts from the highest epoch of a stream's events before its fromSeq.
	// Without an index on the epoch, finding it read every earlier event of the
	// stream (payloads included): a read of the events past seq N of a long stream
	// cost O(N). Walked from a stream's highest epoch down, this index answers it
	// at the first entry below fromSeq.
	{
		`CREATE INDEX events_by_epoch ON events (session_id, epoch, seq)`,
	},
	// 5: the epoch index holds the leased events only (epoch > 0): those of epoch 0
	// (Append, every event of an embedded node) are never hidden, so Read's lookup
	// of the highest epoch before fromSeq (readEpochQuery) has no use for them, and
	// each cost the writer an index entry. On a log that was never fenced the index
	// stays empty.
	{
		`DROP INDEX events_by_epoch`,
		`CREATE INDEX events_by_epoch ON events (session_id, epoch, seq) WHERE epoch > 0`,
	},
	// 6: the running sessions, listed at every start, partition assignment and
	// list of pending approvals, are found through an index that holds them only:
	// a scan of the summary visited every stream the log ever had, the ended
	// sessions' and the streams that are no session (a dashboard sign-in is one,
	// and 10,000 ended sign-ins made the listing of 100 running sessions 20 times
	// slower).
	{
		`CREATE INDEX sessions_running ON sessions (started_us DESC, session_id) WHERE ` + runningWhere,
	},
	// 7: the uniqueness of IDs costs an index entry only for the events whose ID is
	// not derived from their position (see idIndexStmts); olderBuildSteps and
	// narrowIDIndex defer the rebuild of the table while another process may run.
	slices.Concat(idIndexStmts, aliasesStmts),
	// 8: the epoch index holds, of the leased events, those that may start a run
	// of their session's events of one epoch (epoch_start, see epochStartWhere)
	// instead of all: an owner's events of a session cost one entry, not one each.
	// A row written before (or by an older build) starts one. Index
	// events_by_epoch goes, unless another process may run (notAloneSteps).
	slices.Concat(epochStartStmts, []string{`DROP INDEX events_by_epoch`}),
	// 9: an owner that gives its partitions up cleanly, once the bus has every
	// event it appended for them, marks its owner record released
	// (eventlog.Releasing): the next owner then publishes nothing of their ended
	// sessions again. 0: not released. Older builds insert ownership rows with
	// their columns named, and read no released_us: they run beside it.
	{
		`ALTER TABLE ownership ADD COLUMN released_us INTEGER NOT NULL DEFAULT 0`,
	},
	// 10: an owner marks its owner records, every few seconds while it holds the
	// partitions, with the time before which every event it appended for them is
	// on the bus (eventlog.Releasing.MarkPublished): a next owner taking them
	// from a node that died unreleased publishes again only the sessions that
	// ended after it. 0: no mark. Older builds run beside it as beside 9.
	{
		`ALTER TABLE ownership ADD COLUMN published_us INTEGER NOT NULL DEFAULT 0`,
	},
	// 11: one fold snapshot per session (eventlog.Snapshots): a derived cache of
	// its folded state, which a session actor re-activated folds the events after
	// instead of its whole history. A new table: older builds run beside it.
	{
		`CREATE TABLE fold_snapshots (
			session_id TEXT    NOT NULL PRIMARY KEY,
			seq        INTEGER NOT NULL,
			event_id   TEXT    NOT NULL,
			event_sum  TEXT    NOT NULL,
			rules      INTEGER NOT NULL,
			codec      TEXT    NOT NULL,
			agents     TEXT    NOT NULL,
			state      BLOB    NOT NULL,
			sum        TEXT    NOT NULL
		)`,
	},
	// 12: the record of summary rows that lag their events (lag.go): the highest
	// rowid of the events before them, one row at most. A new table: older
	// builds run beside it.
	{
		`CREATE TABLE summary_lag (
			id         INTEGER NOT NULL PRIMARY KEY,
			from_rowid INTEGER NOT NULL
		)`,
	},
}

// epochStartWhere is the condition of index events_by_epoch_start: a leased event
// whose epoch_start is set, which the writer clears only when the event at the
// seq before, stored for good, has the same epoch (Log.epochStart). Each event it
// leaves out has then, at a lower seq, one with the same epoch that the index
// holds (at worst the session's first, which has no event before it): the highest
// epoch of a session's events before a seq is that of the indexed ones, and so
// is the highest of all of them. Statements that search it repeat it word for word.
const epochStartWhere = `epoch > 0 AND epoch_start = 1`

// epochStartStmts add the column epoch_start and the index over it (schema 8).
// No comment inside ADD COLUMN (see migration 2).
var epochStartStmts = []string{
	`ALTER TABLE events ADD COLUMN epoch_start INTEGER NOT NULL DEFAULT 1`,
	`CREATE INDEX events_by_epoch_start ON events (session_id, epoch, seq) WHERE ` + epochStartWhere,
}

// eventsTable is the events table of SchemaVersion, and eventsIndexes its
// indexes: narrowIDIndex rebuilds the table with them.
var (
	eventsTable = `CREATE TABLE events_new (
			session_id     TEXT    NOT NULL,
			seq            INTEGER NOT NULL,
			id             TEXT    NOT NULL,
			type           TEXT    NOT NULL,
			version        INTEGER NOT NULL,
			causation_id   TEXT    NOT NULL,
			correlation_id TEXT    NOT NULL,
			ts             INTEGER NOT NULL,
			actor          TEXT    NOT NULL,
			payload        BLOB    NOT NULL,
			epoch          INTEGER NOT NULL DEFAULT 0,
			epoch_start    INTEGER NOT NULL DEFAULT 1,
			PRIMARY KEY (session_id, seq)
		)`
	eventsColumns = `session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload, epoch, epoch_start`
	eventsIndexes = []string{
		`CREATE INDEX events_by_epoch_start ON events (session_id, epoch, seq) WHERE ` + epochStartWhere,
		`CREATE UNIQUE INDEX events_by_id ON events (id) WHERE NOT (` + derivedWhere + `)`,
	}
)

// derivedWhere holds for an event whose ID is derived from its position: the
// canonical ID "<session>/<seq>" (messages.EffectKey), which every event a session
// actor decides carries. Two positions never derive the same ID (the seq is the
// decimal after the last '/'), so the primary key keeps those IDs unique.
const derivedWhere = `id = session_id || '/' || seq`

// idIndexStmts rebuild the events table without its UNIQUE (id) constraint, whose
// index took an entry for every event, and index the IDs that are not derived
// from their position only (events_by_id, unique). An ID is still unique in the
// log: two events with one non-derived ID conflict in events_by_id, two with one
// derived ID in the primary key; and where the ID of an event is the derived ID of
// another position (it aliases it, see table aliases), the writer looks up that
// position (Log.checkID). SQLite cannot drop a constraint: the table is copied.
var idIndexStmts = []string{
	`CREATE TABLE events_v7 (
			session_id     TEXT    NOT NULL,
			seq            INTEGER NOT NULL,
			id             TEXT    NOT NULL,
			type           TEXT    NOT NULL,
			version        INTEGER NOT NULL,
			causation_id   TEXT    NOT NULL,
			correlation_id TEXT    NOT NULL,
			ts             INTEGER NOT NULL,
			actor          TEXT    NOT NULL,
			payload        BLOB    NOT NULL,
			epoch          INTEGER NOT NULL DEFAULT 0,
			PRIMARY KEY (session_id, seq)
		)`,
	`INSERT INTO events_v7 (session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload, epoch)
		SELECT session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload, epoch FROM events ORDER BY rowid`,
	`DROP TABLE events`,
	`ALTER TABLE events_v7 RENAME TO events`,
	`CREATE INDEX events_by_epoch ON events (session_id, epoch, seq) ` + epochIndexWhere,
	`CREATE UNIQUE INDEX events_by_id ON events (id) WHERE NOT (` + derivedWhere + `)`,
}

// aliasesStmts make and fill table aliases: the IDs of stored events that are
// the derived ID of another position than their own (such as an event a writer
// moved to another seq). While it is empty, which it is in a log only nodes
// wrote, the writer need not look for an alias of each derived ID it inserts:
// it reads whether the table is empty once per transaction. It may hold more
// than those IDs (the statement here takes every ID ending in '/' and digits,
// leading zeros too), which costs lookups only.
var aliasesStmts = []string{
	`CREATE TABLE IF NOT EXISTS aliases (id TEXT NOT NULL PRIMARY KEY) WITHOUT ROWID`,
	`INSERT OR IGNORE INTO aliases (id) SELECT id FROM events
		WHERE NOT (` + derivedWhere + `) AND length(rtrim(id, '0123456789')) BETWEEN 2 AND length(id) - 1
		AND substr(rtrim(id, '0123456789'), -1) = '/'`,
}

// runningWhere is the condition of the index sessions_running: a session whose
// status is running (sessionStatus) and whose ID starts with none of the prefixes
// of the streams that were no session when the index was made (a later prefix is
// filtered by the query, eventlog.NotPrefixed). listRunningQuery repeats it word
// for word, which SQLite needs to use the index.
var runningWhere = `(tasks > ended OR status = 'running') AND ` + notPrefixed("notes/", "memory/", "kb/", "a2a/push/", "ui/signin/")

// notPrefixed is eventlog.NotPrefixed over session_id, of a fixed list of prefixes.
func notPrefixed(prefixes ...string) string {
	conds := make([]string, len(prefixes))
	for i, p := range prefixes {
		conds[i] = fmt.Sprintf("substr(session_id, 1, %d) != '%s'", len(p), p)
	}
	return strings.Join(conds, " AND ")
}

// readEpochQuery is the highest epoch of the events of a session before a seq,
// 0 if none is leased. It names epochStartWhere, so that SQLite may use the
// partial index events_by_epoch_start (INDEXED BY makes preparing it fail
// otherwise), walked from the session's highest epoch down to the first entry
// below the seq.
const readEpochQuery = `SELECT coalesce((SELECT epoch FROM events INDEXED BY events_by_epoch_start
		WHERE session_id = ? AND ` + epochStartWhere + ` AND seq < ? ORDER BY epoch DESC LIMIT 1), 0)`

// sessionStatus is eventlog.SessionStatus over a row of the sessions table, whose
// status column holds the status of the session's highest-seq task.* event, or
// running when it has none.
const sessionStatus = `CASE WHEN tasks > ended THEN 'running' ELSE status END`

// sessionParent is eventlog.SessionInfo.Parent over a row of the sessions table:
// the parent named by the session's first event when it is a task.submitted
// (messages.TaskSubmitted.Parent), read from the payload by the primary key, for
// the rows listed only; NULL otherwise. No column: nothing to migrate, and a log
// written before sub-agents existed lists as it did.
var sessionParent = `(SELECT ` + payloadField("p", "$.parent.session_id") + ` FROM events p
		WHERE p.session_id = sessions.session_id AND p.seq = 1 AND p.type = 'task.submitted')`

// sessionAgent is the agent of a row of the sessions table (eventlog.Filter.Agent):
// the agent named by the session's first task.submitted event, "default" for one
// naming none, read from the payload by the primary key, for the rows the listing
// reads only; NULL for a stream with no task.submitted. No column, as
// sessionParent. It is the agent the analytics (eventsWithAgent) charge the
// session's first task to.
var sessionAgent = `(SELECT COALESCE(NULLIF(` + payloadField("p", "$.agent") + `, ''), '` + eventlog.DefaultAgent + `') FROM events p
		WHERE p.session_id = sessions.session_id AND p.type = 'task.submitted' ORDER BY p.seq LIMIT 1)`

// payloadField is json_extract of path over the payload of the events row alias,
// NULL when SQLite's JSON functions cannot read the payload: one nested deeper than
// their 1000 levels, which Go's decoder reads (an import's bytes, a memory's
// metadata) and json_extract fails the whole query for. json_valid reads all else
// as json_extract does.
func payloadField(alias, path string) string {
	p := "CAST(" + alias + ".payload AS TEXT)"
	return "CASE WHEN json_valid(" + p + ") THEN json_extract(" + p + ", '" + path + "') END"
}

// SchemaVersion is the schema version this build writes.
const SchemaVersion = 12 // = len(migrations), checked by a test

// olderBuildSteps are the migrations whose statements a process of an older
// build, still running on a Shared log, cannot live with, and what migrate does
// instead while such a process may run (it opens the log beside others):
//
//   - 5 replaces events_by_epoch with a partial index, which the statement of a
//     build of schema 4 (INDEXED BY events_by_epoch, without epoch > 0) cannot use:
//     every Read with fromSeq > 1 of that process would fail with "no query
//     solution", and nothing in it checks the schema again before it restarts.
//     Instead the full index stays, which this build's statements use as well
//     (they name epoch > 0, which a full index serves too); narrowEpochIndex makes
//     it partial at an Open that finds the directory held by nobody else.
var olderBuildSteps = map[int][]string{
	4: nil,
}

// notAloneSteps are the migrations that no process of an older build can live
// with, of whichever schema it is, and what migrate does instead while one may
// run (see olderBuildSteps), whatever the version the log was found at:
//
//   - 7 drops the UNIQUE (id) constraint, on which the writer of an older build
//     relies to refuse an event whose ID is stored at another position: with it
//     gone, that writer would store the event. Instead the table keeps the
//     constraint (it keeps IDs unique for both builds, and this build's lookups
//     find the stored events through it too), and only table aliases is made;
//     narrowIDIndex rebuilds the table at an Open that finds the directory held
//     by nobody else.
//   - 8 drops index events_by_epoch, which the statements of older builds name
//     (INDEXED BY): instead it stays, and dropEpochIndex drops it at an Open
//     alone. Until then appends write both indexes.
var notAloneSteps = map[int][]string{
	6: aliasesStmts,
	7: epochStartStmts,
}

// dropEpochIndex drops index events_by_epoch (schema 8), which migrate kept for
// processes of older builds (notAloneSteps). Open calls it when it holds the log
// alone, after narrowEpochIndex.
func dropEpochIndex(ctx context.Context, conn *sql.Conn, path string) error {
	if _, err := conn.ExecContext(ctx, "DROP INDEX IF EXISTS events_by_epoch"); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: drop index events_by_epoch: %w", path, err)
	}
	return nil
}

// narrowIDIndex rebuilds the events table without its UNIQUE (id) constraint
// (schema 7) where migrate left it for a process of an older build
// (notAloneSteps), and fills table aliases again, with what that process may
// have written since. Open calls it when it holds the log alone.
func narrowIDIndex(ctx context.Context, conn *sql.Conn, path string) error {
	unique := func() (bool, error) {
		var n int
		err := conn.QueryRowContext(ctx, "SELECT count(*) FROM pragma_index_list('events') WHERE origin = 'u'").Scan(&n)
		if err != nil {
			return false, fmt.Errorf("eventlog/sqlite: %s: look up the unique constraints of events: %w", path, err)
		}
		return n > 0, nil
	}
	rebuild := slices.Concat([]string{
		eventsTable,
		`INSERT INTO events_new (` + eventsColumns + `) SELECT ` + eventsColumns + ` FROM events ORDER BY rowid`,
		`DROP TABLE events`,
		`ALTER TABLE events_new RENAME TO events`,
	}, eventsIndexes, aliasesStmts)
	return finishStep(ctx, conn, path, "drop the unique constraint of events.id", unique, rebuild)
}

// finishStep runs stmts in one write transaction if needed says the step they
// finish is still to do: asked first without a lock (the usual answer, done
// already, costs no write lock), then again under it, since another process may
// have finished the step in between.
func finishStep(ctx context.Context, conn *sql.Conn, path, what string, needed func() (bool, error), stmts []string) error {
	if n, err := needed(); err != nil || !n {
		return err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: %s: begin: %w", path, what, err)
	}
	n, err := needed()
	if err == nil && n {
		for _, stmt := range stmts {
			if _, err = conn.ExecContext(ctx, stmt); err != nil {
				err = fmt.Errorf("eventlog/sqlite: %s: %s: %w", path, what, err)
				break
			}
		}
	}
	if err != nil {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: %s: commit: %w", path, what, err)
	}
	return nil
}

// epochIndexWhere is the condition of the partial index events_by_epoch (schema 5).
const epochIndexWhere = "WHERE epoch > 0"

// narrowEpochIndex makes events_by_epoch partial (schema 5) where migrate left the
// full index of schema 4 for a process of an older build (olderBuildSteps). Open
// calls it when it holds the log alone, so no such process runs.
func narrowEpochIndex(ctx context.Context, conn *sql.Conn, path string) error {
	full := func() (bool, error) {
		var ddl string
		err := conn.QueryRowContext(ctx, "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'events_by_epoch'").Scan(&ddl)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil // dropped (schema 8)
		}
		if err != nil {
			return false, fmt.Errorf("eventlog/sqlite: %s: look up index events_by_epoch: %w", path, err)
		}
		return !strings.Contains(ddl, epochIndexWhere), nil
	}
	return finishStep(ctx, conn, path, "narrow index events_by_epoch", full, migrations[4])
}

// migrate brings the database on conn to SchemaVersion, one transaction per step. It
// is idempotent, and refuses a database written by a newer build. Each step takes
// the write lock first (BEGIN IMMEDIATE) and reads the version again inside it, so
// that processes opening one fresh Shared log at once migrate it once. Unless
// alone (no other process held the log as it opened), a step of olderBuildSteps
// from the version the log was found at runs its replacement.
func migrate(ctx context.Context, conn *sql.Conn, path string, alone bool) error {
	version := func() (int, error) {
		var v int
		if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
			return 0, fmt.Errorf("eventlog/sqlite: read schema version of %s: %w", path, err)
		}
		if v > SchemaVersion {
			return 0, fmt.Errorf("eventlog/sqlite: %s has schema version %d, this build knows up to %d: run a newer build",
				path, v, SchemaVersion)
		}
		return v, nil
	}
	if v, err := version(); err != nil || v == SchemaVersion {
		return err // up to date: no write lock needed
	}
	// Only a log found at a version may be in use by a process of a build of that
	// version: the steps after the first run as they are.
	for first := true; ; first = false {
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return fmt.Errorf("eventlog/sqlite: migrate %s: begin: %w", path, err)
		}
		v, err := version()
		if err == nil && v == SchemaVersion { // done, by this loop or by another process
			if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
				return fmt.Errorf("eventlog/sqlite: migrate %s: commit: %w", path, err)
			}
			return nil
		}
		if err == nil {
			stmts := migrations[v]
			if instead, ok := olderBuildSteps[v]; ok && !alone && first {
				stmts = instead
			}
			if instead, ok := notAloneSteps[v]; ok && !alone {
				stmts = instead
			}
			err = migrateStep(ctx, conn, v, stmts)
			if err != nil {
				err = fmt.Errorf("eventlog/sqlite: migrate %s to schema %d: %w", path, v+1, err)
			}
		}
		if err != nil {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
			return err
		}
	}
}

// migrateStep moves the schema from version v to v+1 with stmts (migrations[v],
// or its replacement) and commits, inside the transaction that migrate began.
func migrateStep(ctx context.Context, conn *sql.Conn, v int, stmts []string) error {
	for _, stmt := range slices.Concat(stmts, []string{fmt.Sprintf("PRAGMA user_version = %d", v+1)}) {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	_, err := conn.ExecContext(ctx, "COMMIT")
	return err
}
