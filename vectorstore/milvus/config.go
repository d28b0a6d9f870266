package milvus

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/troupe-run/troupe/redact"
)

// Consistency is the consistency level of searches (see doc.go).
type Consistency string

// Consistency levels, as Milvus names them.
const (
	// Strong: a search sees every write acknowledged before it started, from any
	// client. The default: the Store contract promises read-your-writes.
	Strong Consistency = "strong"
	// Session: a search sees the writes of this Store, and others' after a delay.
	Session Consistency = "session"
	// Bounded: a search may miss writes of the last few seconds (the server's
	// common.gracefulTime, 5 s by default), even this Store's own.
	Bounded Consistency = "bounded"
	// Eventually: a search sees whatever the query nodes have consumed.
	Eventually Consistency = "eventually"
)

// Config configures a Milvus Store. The zero value is valid: every zero field takes
// the default named in its comment, and New then talks to a local server
// (deploy/milvus.sh) in the database "default", with collections named "troupe_…".
type Config struct {
	// Addr is the server's gRPC address, host:port. Default "127.0.0.1:19530".
	Addr string
	// DB is the Milvus database that holds the collections; it must exist. Empty
	// means the server's "default" database.
	DB string
	// Username and Password authenticate when the server has authentication on.
	Username string
	Password string
	// Prefix is put before every collection name to form the Milvus collection name,
	// so that several stores (tenants, test runs) can share a database. Letters,
	// digits and underscores, starting with a letter or underscore, at most 64 bytes.
	// Default "troupe_".
	Prefix string
	// Consistency is the consistency level of searches. Default Strong.
	Consistency Consistency
	// DialTimeout bounds connecting to the server in New. Default 10s.
	DialTimeout time.Duration
	// RequestTimeout bounds each request to the server (a call may make a few:
	// describing or creating its collection, then the write or search). Default 30s.
	RequestTimeout time.Duration
}

// Defaults of Config.
const (
	DefaultAddr           = "127.0.0.1:19530"
	DefaultPrefix         = "troupe_"
	DefaultConsistency    = Strong
	DefaultDialTimeout    = 10 * time.Second
	DefaultRequestTimeout = 30 * time.Second
)

// maxPrefix is the longest Config.Prefix, in bytes. It leaves room in Milvus's 255
// bytes for a readable part of the collection name and a hash (see physicalName).
const maxPrefix = 64

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Consistency == "" {
		c.Consistency = DefaultConsistency
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	return c
}

// Validate reports every invalid field of c. Zero fields are valid: they take defaults.
func (c Config) Validate() error {
	var errs []error
	if c.Addr != "" && (strings.Contains(c.Addr, "://") || !strings.Contains(c.Addr, ":")) {
		errs = append(errs, fmt.Errorf("Addr is %q, want host:port of the gRPC endpoint", c.Addr))
	}
	if c.DB != "" && !isIdentifier(c.DB) {
		errs = append(errs, fmt.Errorf("DB is %q, want letters, digits and underscores, not starting with a digit", c.DB))
	}
	if c.Password != "" && c.Username == "" {
		errs = append(errs, errors.New("Password is set without Username"))
	}
	if c.Prefix != "" && (!isIdentifier(c.Prefix) || len(c.Prefix) > maxPrefix) {
		errs = append(errs, fmt.Errorf("Prefix is %q, want letters, digits and underscores, not starting with a digit, at most %d bytes", c.Prefix, maxPrefix))
	}
	switch c.Consistency {
	case "", Strong, Session, Bounded, Eventually:
	default:
		errs = append(errs, fmt.Errorf("Consistency is %q, want strong, session, bounded or eventually", c.Consistency))
	}
	if c.DialTimeout < 0 {
		errs = append(errs, fmt.Errorf("DialTimeout is %s, want >= 0", c.DialTimeout))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("RequestTimeout is %s, want >= 0", c.RequestTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("vectorstore/milvus: invalid config: %w", err)
	}
	return nil
}

// String describes the configuration without its password.
func (c Config) String() string {
	pw := "none"
	if c.Password != "" {
		pw = redact.Redacted
	}
	return fmt.Sprintf("milvus.Config{Addr:%s DB:%s Username:%s Password:%s Prefix:%s Consistency:%s DialTimeout:%s RequestTimeout:%s}",
		c.Addr, c.DB, c.Username, pw, c.Prefix, c.Consistency, c.DialTimeout, c.RequestTimeout)
}

// Format makes every fmt verb (%v, %+v, %#v, %s) print String, never the password.
func (c Config) Format(f fmt.State, _ rune) { _, _ = fmt.Fprint(f, c.String()) }

// LogValue implements slog.LogValuer without the password.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("addr", c.Addr), slog.String("db", c.DB), slog.String("username", c.Username),
		slog.Bool("password_set", c.Password != ""), slog.String("prefix", c.Prefix), slog.String("consistency", string(c.Consistency)))
}

// isIdentifier reports whether s is a letter or underscore followed by letters,
// digits and underscores (ASCII): what Milvus accepts in names.
func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || (i > 0 && '0' <= c && c <= '9')) {
			return false
		}
	}
	return true
}
