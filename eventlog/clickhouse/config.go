package clickhouse

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Config configures a ClickHouse event log. The zero value is valid: every zero
// field takes the default named in its comment, and Open then talks to a local
// server (deploy/clickhouse.sh) and uses the database "troupe".
type Config struct {
	// Addr lists the servers' native-protocol addresses (host:port, usually port
	// 9000); the client connects to the first that answers. HTTP is not supported.
	// Default ["127.0.0.1:9000"]. SplitAddr turns "h1:9000,h2:9000" into a list.
	Addr []string
	// Database holds the log's tables; Open creates it and them when missing
	// (unless MustExist). It must be a plain identifier (letters, digits,
	// underscores). Default "troupe".
	Database string
	// MustExist makes Open refuse, with ErrNoLog and creating nothing, a Database
	// that does not exist or that holds no event log (no schema_migrations table):
	// a command that reads a log (replay's list, show, verify, export, stats, and
	// fork, which reads its parent session) given a misspelt name would otherwise
	// create an empty log and report it empty. A log of an older schema is still
	// migrated, as a node of this build would at its start.
	MustExist bool
	// Username and Password authenticate; Username defaults to "default".
	Username string
	Password string
	// TLS, when set, encrypts the connection (the server's tcp_port_secure).
	TLS *tls.Config
	// Compression of the native protocol's data blocks: "lz4" (the default),
	// "zstd" or "none". Both methods work with ClickHouse 18.16 and later.
	Compression string
	// DialTimeout bounds connecting to a server, up to its first answer (the
	// handshake). A request's ctx bounds it too: a query whose ctx ends first
	// on a server that accepts connections and never answers fails then, not
	// after DialTimeout. Default 5s.
	DialTimeout time.Duration
	// QueryTimeout bounds one query: a Read, a Sessions listing, or one attempt to
	// write a batch (the conflict check and the insert). A write attempt that
	// times out is retried like any other failure. Default 60s.
	QueryTimeout time.Duration
	// ResponseTimeout bounds the wait for the first byte of the answer to a request
	// sent on a connection that carried nothing for a second or more, such as the
	// first query after an idle night. A NAT, load balancer or firewall on the way
	// may have forgotten such a connection without a word (its bytes then vanish, and
	// only a timeout tells), while ClickHouse answers any query at once (an INSERT
	// with the table's header, a SELECT with progress while it runs). Past it the
	// connection is dropped and the request retried on a new one, instead of
	// waiting out QueryTimeout; on a live server that is slow to answer, being
	// wrong costs a new connection and one retry. Default 5s.
	ResponseTimeout time.Duration
	// MaxOpenConns bounds the connections to ClickHouse, shared by the writer and
	// by Read and Sessions. A request that waits DialTimeout for a free one fails
	// with an error that says to raise it (wrapping clickhouse-go's
	// ErrAcquireConnTimeout; the writer retries its writes). Default 8.
	MaxOpenConns int

	// BatchSize is the number of events the writer gathers from concurrent Append
	// calls into one INSERT: it writes as soon as this many wait, or when the
	// oldest waiting call has waited FlushInterval. One Append call is never split
	// (so a single larger call goes in one INSERT alone). Default 10000.
	BatchSize int
	// MaxBatchBytes bounds the payload bytes of one INSERT in the same way, so that
	// a few large payloads do not make one huge insert. Default 32 MiB.
	MaxBatchBytes int
	// FlushInterval is how long the first Append call of a batch may wait for more
	// calls to join it. ClickHouse prefers few large inserts to many small ones
	// (each insert makes a part to merge): raise it when many nodes share a server.
	// Default 20ms.
	FlushInterval time.Duration
	// MaxBuffered bounds the events waiting to be written or being written, and
	// MaxBufferedBytes their payload bytes. When either is reached, Append blocks
	// (back-pressure) until the writer makes room or the caller's ctx ends. A
	// single call larger than the bound is admitted when nothing else is buffered.
	// Defaults 100000 events and 256 MiB.
	MaxBuffered      int
	MaxBufferedBytes int
	// RetryInitialBackoff and RetryMaxBackoff shape the writer's retries while
	// ClickHouse fails: the first retry waits RetryInitialBackoff, each next one
	// twice as long (with ±20% jitter), up to RetryMaxBackoff. The writer retries
	// until the write succeeds, every caller of the batch gave up, or Close gives
	// up. Defaults 100ms and 5s.
	RetryInitialBackoff time.Duration
	RetryMaxBackoff     time.Duration
	// OpenWait, when not 0, bounds how long Open retries while the server cannot
	// be reached: past it, Open returns the last error instead of waiting for the
	// next attempt. A command a user waits for (replay) sets it; a node leaves it 0
	// and retries until its ctx ends. An attempt under way, a migration included,
	// is not cut short.
	OpenWait time.Duration
	// CompactMin is the fewest superseded events of a knowledge base that a
	// compaction deletes at once (eventlog.CompactingCost): each deletion is
	// a mutation (ALTER TABLE … DELETE) that rewrites every data part holding
	// the base's events, which in a merged table are large parts shared with
	// every other stream, so it must be worth many events, not one write's
	// few. A knowledge base's stream then holds up to about this many events
	// beyond its live documents. Default 512.
	CompactMin int
	// NoSummaryRepair keeps Open from repairing, in the background, the
	// summaries of knowledge bases' streams that a compaction cut short left
	// stale (see Log.DeleteEvents). A short-lived reader that writes nothing,
	// such as replay's list and show, sets it: the repair is a node's work, and
	// a reader that closes at once would only stop it. A Log opened so still
	// settles the summaries of its own compactions.
	NoSummaryRepair bool
	// MaxSnapshotBytes bounds the state of a fold snapshot (eventlog.Snapshots)
	// that SaveSnapshot writes: a larger one is refused with ErrSnapshotTooLarge,
	// before anything is sent, and the session's snapshot stays as it was (its
	// session actor logs it and folds as without one). A state is about 3 KB a
	// task of a long session (14 MB at 5,000 tasks); the native protocol and the
	// server take one row of hundreds of megabytes, which the bound keeps from
	// the writer's connections and the server's memory. Default 64 MiB.
	MaxSnapshotBytes int
	// CloseTimeout bounds how long Close waits for buffered appends to be written
	// before it fails them with eventlog.ErrClosed. Default 10s.
	CloseTimeout time.Duration
	// Logger receives what the log cannot return to a caller: failed write attempts
	// that will be retried, and recovery after them. Default slog.Default().
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultAddr                = "127.0.0.1:9000"
	DefaultDatabase            = "troupe"
	DefaultUsername            = "default"
	DefaultCompression         = "lz4"
	DefaultDialTimeout         = 5 * time.Second
	DefaultQueryTimeout        = time.Minute
	DefaultResponseTimeout     = 5 * time.Second
	DefaultMaxOpenConns        = 8
	DefaultBatchSize           = 10_000
	DefaultMaxBatchBytes       = 32 << 20
	DefaultFlushInterval       = 20 * time.Millisecond
	DefaultMaxBuffered         = 100_000
	DefaultMaxBufferedBytes    = 256 << 20
	DefaultRetryInitialBackoff = 100 * time.Millisecond
	DefaultRetryMaxBackoff     = 5 * time.Second
	DefaultCloseTimeout        = 10 * time.Second
	DefaultCompactMin          = 512
	DefaultMaxSnapshotBytes    = 64 << 20
)

// SplitAddr splits a comma-separated list of addresses, such as the value of an
// environment variable, dropping empty entries and spaces.
func SplitAddr(s string) []string {
	var addrs []string
	for a := range strings.SplitSeq(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if len(c.Addr) == 0 {
		c.Addr = []string{DefaultAddr}
	}
	if c.Database == "" {
		c.Database = DefaultDatabase
	}
	if c.Username == "" {
		c.Username = DefaultUsername
	}
	if c.Compression == "" {
		c.Compression = DefaultCompression
	}
	setDuration(&c.DialTimeout, DefaultDialTimeout)
	setDuration(&c.QueryTimeout, DefaultQueryTimeout)
	setDuration(&c.ResponseTimeout, DefaultResponseTimeout)
	setInt(&c.MaxOpenConns, DefaultMaxOpenConns)
	setInt(&c.BatchSize, DefaultBatchSize)
	setInt(&c.MaxBatchBytes, DefaultMaxBatchBytes)
	setDuration(&c.FlushInterval, DefaultFlushInterval)
	setInt(&c.MaxBuffered, DefaultMaxBuffered)
	setInt(&c.MaxBufferedBytes, DefaultMaxBufferedBytes)
	setDuration(&c.RetryInitialBackoff, DefaultRetryInitialBackoff)
	setDuration(&c.RetryMaxBackoff, max(DefaultRetryMaxBackoff, c.RetryInitialBackoff))
	setDuration(&c.CloseTimeout, DefaultCloseTimeout)
	setInt(&c.CompactMin, DefaultCompactMin)
	setInt(&c.MaxSnapshotBytes, DefaultMaxSnapshotBytes)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func setInt(v *int, d int) {
	if *v == 0 {
		*v = d
	}
}

func setDuration(v *time.Duration, d time.Duration) {
	if *v == 0 {
		*v = d
	}
}

// checkHostPort says what makes a, a host:port, one that a dial cannot use. A
// port given by name ("host:clickhouse") is left to the dial, and so is no host
// (":9000"), which a dial takes for this machine.
func checkHostPort(a string) error {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); port == "" || err == nil && (n < 1 || n > 65535) {
		return fmt.Errorf("port %q is not 1-65535", port)
	}
	return nil
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate reports every invalid field of c. Zero fields are valid: they take defaults.
func (c Config) Validate() error {
	var errs []error
	for i, a := range c.Addr {
		if strings.TrimSpace(a) == "" || strings.Contains(a, "://") {
			errs = append(errs, fmt.Errorf("Addr[%d] is %q, want host:port of the native protocol", i, a))
		} else if err := checkHostPort(a); err != nil {
			// An address no dial can use (no port, too many colons, port 99999)
			// is refused here: Open would retry it as a server that is down.
			errs = append(errs, fmt.Errorf("Addr[%d] is %q, want host:port of the native protocol: %w", i, a, err))
		}
	}
	if c.Database != "" && !identifier.MatchString(c.Database) {
		errs = append(errs, fmt.Errorf("Database is %q, want letters, digits and underscores, not starting with a digit", c.Database))
	}
	switch c.Compression {
	case "", "lz4", "zstd", "none":
	default:
		errs = append(errs, fmt.Errorf("Compression is %q, want lz4, zstd or none", c.Compression))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"DialTimeout", c.DialTimeout},
		{"QueryTimeout", c.QueryTimeout},
		{"ResponseTimeout", c.ResponseTimeout},
		{"FlushInterval", c.FlushInterval},
		{"RetryInitialBackoff", c.RetryInitialBackoff},
		{"RetryMaxBackoff", c.RetryMaxBackoff},
		{"OpenWait", c.OpenWait},
		{"CloseTimeout", c.CloseTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s is %s, want >= 0", d.name, d.v))
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{
		{"MaxOpenConns", c.MaxOpenConns},
		{"BatchSize", c.BatchSize},
		{"MaxBatchBytes", c.MaxBatchBytes},
		{"MaxBuffered", c.MaxBuffered},
		{"MaxBufferedBytes", c.MaxBufferedBytes},
		{"CompactMin", c.CompactMin},
		{"MaxSnapshotBytes", c.MaxSnapshotBytes},
	} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("%s is %d, want >= 0", n.name, n.v))
		}
	}
	if c.RetryInitialBackoff > 0 && c.RetryMaxBackoff > 0 && c.RetryMaxBackoff < c.RetryInitialBackoff {
		errs = append(errs, fmt.Errorf("RetryMaxBackoff (%s) is below RetryInitialBackoff (%s)", c.RetryMaxBackoff, c.RetryInitialBackoff))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("eventlog/clickhouse: invalid config: %w", err)
	}
	return nil
}
