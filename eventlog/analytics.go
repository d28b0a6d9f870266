package eventlog

import (
	"context"
	"encoding/json"

	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// Analytics is an optional capability of a Log: the fleet figures `replay stats`
// prints. Both the SQLite and the ClickHouse logs have it; find it by type assertion.
// A stream whose ID starts with NotesStreamPrefix, MemoryStreamPrefix or
// KnowledgeStreamPrefix is an agent's notes, a memory namespace or a knowledge base,
// not a session: Report counts none as a session.
type Analytics interface {
	Report(ctx context.Context, f StatsFilter) (*Stats, error)
}

// NotesStreamPrefix starts the ID of every stream of the log that holds an agent's
// notes (tools/notes: notes/<agent>). No task runs there: it is no session.
const NotesStreamPrefix = "notes/"

// MemoryStreamPrefix starts the ID of every stream of the log that holds a memory
// namespace (package memory: memory/<namespace>). No task runs there: it is no session.
const MemoryStreamPrefix = "memory/"

// KnowledgeStreamPrefix starts the ID of every stream of the log that holds a
// knowledge base (package knowledge: kb/<name>). No task runs there: it is no session.
const KnowledgeStreamPrefix = "kb/"

// A2APushStreamPrefix starts the ID of every stream of the log that holds an A2A
// task's push-notification configs (package a2a: a2a/push/<taskID>). No task runs
// there: it is no session.
const A2APushStreamPrefix = "a2a/push/"

// UISignInStreamPrefix starts the ID of every stream of the log that holds a
// dashboard sign-in (package node: ui/signin/<hex SHA-256 of the session cookie's
// ID>). No task runs there: it is no session.
const UISignInStreamPrefix = "ui/signin/"

// MCPSessionStreamPrefix starts the ID of every stream of the log that holds an
// MCP client's session with the node's MCP server (package mcp: mcp/session/<the
// session's ID>). No task runs there: it is no session.
const MCPSessionStreamPrefix = "mcp/session/"

// BusStreamPrefix starts the ID of every stream of the log that holds an effect
// request or reply too large for one bus message (messages.EffectStored:
// bus/<kind>/<id>). No task runs there: it is no session.
const BusStreamPrefix = messages.BusStreamPrefix

// ConfigStreamPrefix starts the ID of every stream of the log that holds the
// configuration of an agent that tasks ran under (messages.ConfigRecorded:
// config/<digest>). No task runs there: it is no session.
const ConfigStreamPrefix = messages.ConfigStreamPrefix

// NonSessionPrefixes start the IDs of the streams of the log that are no session:
// an agent's notes, a memory namespace, a knowledge base, an A2A task's push
// configs, a dashboard sign-in, an MCP client's session, a stored effect command, an
// agent's configuration. Each is free of SQL pattern and quote characters.
var NonSessionPrefixes = []string{NotesStreamPrefix, MemoryStreamPrefix, KnowledgeStreamPrefix, A2APushStreamPrefix, UISignInStreamPrefix, MCPSessionStreamPrefix, BusStreamPrefix, ConfigStreamPrefix}

// IsSession reports whether a stream of the log is a session: its ID starts with
// none of NonSessionPrefixes. Whoever resumes, lists or counts sessions skips the
// others.
func IsSession(id string) bool {
	for _, p := range NonSessionPrefixes {
		if strings.HasPrefix(id, p) {
			return false
		}
	}
	return true
}

// NotPrefixed is an SQL condition that holds when the text of column starts with
// none of NonSessionPrefixes, written with substr (SQLite's; ClickHouse's
// substring is given as fn): the logs' conditions of IsSession.
func NotPrefixed(fn, column string) string {
	conds := make([]string, len(NonSessionPrefixes))
	for i, p := range NonSessionPrefixes {
		conds[i] = fmt.Sprintf("%s(%s, 1, %d) != '%s'", fn, column, len(p), p)
	}
	return strings.Join(conds, " AND ")
}

// StatsFilter narrows Stats. The zero value covers every session.
type StatsFilter struct {
	// SinceUS keeps events at or after this Unix-microsecond time.
	SinceUS int64
	// Agent keeps sessions of this agent ("default" for tasks that named none).
	Agent string
	// Buckets, when positive, asks for Stats.Series: the range from SinceUS to
	// UntilUS in this many buckets of equal width (at most MaxBuckets).
	Buckets int
	// UntilUS ends the series' range (its events are before it); with Buckets it
	// is after SinceUS.
	UntilUS int64
}

// MaxBuckets bounds StatsFilter.Buckets.
const MaxBuckets = 1000

// CheckSeries says what is wrong with f's series, if it asks for one.
func (f StatsFilter) CheckSeries() error {
	switch {
	case f.Buckets < 0 || f.Buckets > MaxBuckets:
		return fmt.Errorf("eventlog: %d buckets: want 1 to %d", f.Buckets, MaxBuckets)
	case f.Buckets > 0 && f.UntilUS <= f.SinceUS:
		return fmt.Errorf("eventlog: a series from %d to %d µs: want its end after its start", f.SinceUS, f.UntilUS)
	}
	return nil
}

// BucketUS is the width of a bucket of f's series, in µs: the range over the
// buckets, rounded up (at least 1).
func (f StatsFilter) BucketUS() int64 {
	if f.Buckets <= 0 {
		return 0
	}
	n := int64(f.Buckets)
	return max(1, (f.UntilUS-f.SinceUS+n-1)/n)
}

// Series is f's series with every bucket at zero, each with its start.
func (f StatsFilter) Series() []SeriesBucket {
	out, width := make([]SeriesBucket, f.Buckets), f.BucketUS()
	for i := range out {
		out[i].StartUS = f.SinceUS + int64(i)*width
	}
	return out
}

// SeriesBucket is the figures of one bucket of a series (Stats.Series), those the
// dashboard's charts show, of the events at or after StartUS and before the next
// bucket's start, as the rest of Stats counts them (a fork's own calls, of the
// agent asked for).
type SeriesBucket struct {
	StartUS int64 `json:"start_us"`
	// Tokens is the prompt and completion tokens of the model calls.
	Tokens  int64   `json:"tokens"`
	CostUSD float64 `json:"cost_usd"`
	// ToolCalls, ToolLatencyUS (their sum) and ToolLatencyMaxUS are those of the
	// tool calls that completed.
	ToolCalls        int64 `json:"tool_calls"`
	ToolLatencyUS    int64 `json:"tool_latency_us"`
	ToolLatencyMaxUS int64 `json:"tool_latency_max_us"`
	// Errors counts the model calls and tool calls that failed, and the tasks
	// that failed.
	Errors int64 `json:"errors"`
}

// Stats are the figures of a log. Every list is sorted so output is stable.
type Stats struct {
	Models   []ModelUsage   `json:"models"`
	Tools    []ToolUsage    `json:"tools"`
	Sessions []SessionUsage `json:"sessions"`
	Memory   []MemoryOps    `json:"memory"`
	// Series is the range in buckets of time, when the filter asked for them
	// (StatsFilter.Buckets).
	Series []SeriesBucket `json:"series,omitempty"`
}

// MarshalJSON encodes a list with nothing in it as [], not null (replay stats
// --json, GET /v1/stats), so that a client iterates it as it iterates any other.
func (s Stats) MarshalJSON() ([]byte, error) {
	type plain Stats
	p := plain(s)
	if p.Models == nil {
		p.Models = []ModelUsage{}
	}
	if p.Tools == nil {
		p.Tools = []ToolUsage{}
	}
	if p.Sessions == nil {
		p.Sessions = []SessionUsage{}
	}
	if p.Memory == nil {
		p.Memory = []MemoryOps{}
	}
	return json.Marshal(p)
}

// ModelUsage is the tokens and cost of one model for one agent on one UTC day.
// A fork's calls are those after its session.forked event: the ones before it
// are its parent's, copied, and counted under the parent only (so are a fork's
// tool calls, ToolUsage, and memory operations, MemoryOps).
type ModelUsage struct {
	Day              string  `json:"day"` // YYYY-MM-DD, UTC
	Agent            string  `json:"agent"`
	Model            string  `json:"model"`
	Calls            int64   `json:"calls"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	CachedTokens     int64   `json:"cached_tokens"`
	CostUSD          float64 `json:"cost_usd"`
}

// ToolUsage is the calls, errors and latency of one tool.
type ToolUsage struct {
	Tool      string  `json:"tool"`
	Calls     int64   `json:"calls"`
	Errors    int64   `json:"errors"`
	ErrorRate float64 `json:"error_rate"`
	P50US     int64   `json:"p50_us"`
	P95US     int64   `json:"p95_us"`
}

// SessionUsage is the sessions of one agent: how many, how they ended, how long and
// how many steps they took (duration: first to last event; of a fork, from its
// session.forked event, since the events before it are its parent's, copied with
// their times, and so are the steps).
type SessionUsage struct {
	Agent         string  `json:"agent"`
	Sessions      int64   `json:"sessions"`
	Completed     int64   `json:"completed"`
	Failed        int64   `json:"failed"`
	Running       int64   `json:"running"`
	AvgSteps      float64 `json:"avg_steps"`
	P50DurationUS int64   `json:"p50_duration_us"`
	P95DurationUS int64   `json:"p95_duration_us"`
}

// MemoryOps counts memory operations (memory.* events) by tier and operation.
type MemoryOps struct {
	Tier  string `json:"tier"`
	Op    string `json:"op"`
	Count int64  `json:"count"`
}

// Sort orders every list of s by its keys.
func (s *Stats) Sort() {
	sort.Slice(s.Models, func(i, j int) bool {
		a, b := s.Models[i], s.Models[j]
		if a.Day != b.Day {
			return a.Day < b.Day
		}
		if a.Agent != b.Agent {
			return a.Agent < b.Agent
		}
		return a.Model < b.Model
	})
	sort.Slice(s.Tools, func(i, j int) bool { return s.Tools[i].Tool < s.Tools[j].Tool })
	sort.Slice(s.Sessions, func(i, j int) bool { return s.Sessions[i].Agent < s.Sessions[j].Agent })
	sort.Slice(s.Memory, func(i, j int) bool {
		if s.Memory[i].Tier != s.Memory[j].Tier {
			return s.Memory[i].Tier < s.Memory[j].Tier
		}
		return s.Memory[i].Op < s.Memory[j].Op
	})
}

// Quantile returns the q-quantile (0..1) of sorted values as ClickHouse's
// quantileExact defines it — the element at index floor(q·n) — so both logs report
// the same figures; 0 for no values. Logs without a quantile function in SQL use it.
func Quantile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)))
	return sorted[max(0, min(i, len(sorted)-1))]
}

// ParseSince reads a "since" bound as `replay stats --since` and GET /v1/stats?since=
// take it: a positive duration back from now (24h), or a date (2026-11-01, UTC) or an
// RFC 3339 time. It returns the bound in Unix microseconds (StatsFilter.SinceUS,
// Filter.SinceUS), 0 for "".
func ParseSince(s string, now time.Time) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d).UnixMicro(), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UnixMicro(), nil
		}
	}
	return 0, fmt.Errorf("since %q: want a duration such as 24h, or a date such as 2026-11-01", s)
}
