package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage:
  every command reads --data DIR (the embedded log, default .troupe) or --clickhouse HOST:PORT

  replay list [--data DIR] [--limit N] [--json]
  replay show <session-id> [--data DIR] [--json]
  replay verify <session-id> [--data DIR] [--json]
  replay fork <session-id> --at SEQ [--data DIR] [--model auto|offline|scripted:FILE|PROVIDER[:MODEL]] [--input TEXT] [--session NEW-ID]
  replay export <session-id> [--data DIR] [--out FILE]
  replay import <file> [--data DIR]
  replay stats [--since 24h|2026-11-01] [--agent NAME] [--data DIR] [--json]
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("replay "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", envOr("TROUPE_DATA", ".troupe"), "data directory of the embedded event log")
	chAddr := fs.String("clickhouse", envOr("TROUPE_CLICKHOUSE", ""), "read and write the ClickHouse event log at HOST:PORT instead")
	asJSON := fs.Bool("json", false, "print JSON for machines")
	limit := fs.Int("limit", 50, "list: at most this many sessions")
	at := fs.Uint64("at", 0, "fork: the last seq copied into the fork")
	modelFlag := fs.String("model", envOr("TROUPE_MODEL", "auto"), "fork: the model that continues the fork (auto, offline, scripted:FILE or PROVIDER[:MODEL])")
	input := fs.String("input", "", "fork: a task to run in the fork after it resumes")
	newID := fs.String("session", "", "fork: the new session's ID (default <parent>-fork-<n>)")
	outFile := fs.String("out", "", "export: write to this file instead of standard output")
	since := fs.String("since", "", "stats: only events since this long ago (e.g. 24h) or this date (2006-01-02 or RFC 3339)")
	agentFlag := fs.String("agent", "", "stats: only sessions of this agent")
	// Flags may come before or after the session ID.
	var positional []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	st := func() store {
		return store{data: *data, clickhouse: *chAddr, database: envOr("TROUPE_CLICKHOUSE_DATABASE", "troupe")}
	}
	one := func() (string, bool) {
		if len(positional) != 1 {
			fmt.Fprint(stderr, usage)
			return "", false
		}
		return positional[0], true
	}
	switch args[0] {
	case "list", "show", "verify", "export", "stats":
	case "fork":
		id, ok := one()
		if !ok {
			return 2
		}
		if *at == 0 {
			fmt.Fprintln(stderr, "error: fork needs --at SEQ (the last event copied from the parent)")
			return 2
		}
		return fork(ctx, st(), id, *at, *modelFlag, *input, *newID, stdout, stderr)
	case "import":
		file, ok := one()
		if !ok {
			return 2
		}
		return importFile(ctx, st(), file, stdout, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
	log, err := st().open(ctx, true)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer log.Close()
	switch args[0] {
	case "list":
		if len(positional) != 0 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		return list(ctx, log, *limit, *asJSON, stdout, stderr)
	case "show":
		if len(positional) != 1 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		return show(ctx, log, positional[0], *asJSON, stdout, stderr)
	case "verify":
		id, ok := one()
		if !ok {
			return 2
		}
		return verify(ctx, log, id, *asJSON, stdout, stderr)
	case "export":
		id, ok := one()
		if !ok {
			return 2
		}
		return export(ctx, log, id, *outFile, stdout, stderr)
	case "stats":
		if len(positional) != 0 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		return stats(ctx, log, *since, *agentFlag, *asJSON, stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return 2
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func list(ctx context.Context, log eventlog.Log, limit int, asJSON bool, stdout, stderr io.Writer) int {
	infos, err := log.Sessions(ctx, eventlog.Filter{Limit: limit})
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	if asJSON {
		if infos == nil {
			infos = []eventlog.SessionInfo{}
		}
		return writeJSON(stdout, stderr, infos)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tSTATUS\tSTEPS\tEVENTS\tSTARTED")
	for _, s := range infos {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", s.ID, s.Status, s.Steps, s.Events, time.UnixMicro(s.StartedUS).UTC().Format(time.RFC3339))
	}
	tw.Flush()
	return 0
}

func writeJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	return 0
}

func show(ctx context.Context, log eventlog.Log, id string, asJSON bool, stdout, stderr io.Writer) int {
	events, err := log.Read(ctx, id, 1)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	if len(events) == 0 {
		fmt.Fprintf(stderr, "error: no session %q\n", id)
		return 1
	}
	tl, err := BuildTimeline(events)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	if asJSON {
		return writeJSON(stdout, stderr, tl)
	}
	w := &errWriter{w: stdout}
	tl.Render(w)
	if w.err != nil {
		fmt.Fprintln(stderr, "error:", w.err)
		return 1
	}
	return 0
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// Timeline is a session's events nested by causation.
type Timeline struct {
	SessionID string         `json:"session_id"`
	Status    string         `json:"status"`
	Events    int            `json:"events"`
	Usage     messages.Usage `json:"usage"`
	Roots     []*Step        `json:"steps"`
}

// Step is one event of the timeline with what a reader wants to know about it.
type Step struct {
	Seq       uint64          `json:"seq"`
	Type      messages.Type   `json:"type"`
	Actor     string          `json:"actor"`
	TS        int64           `json:"ts"`
	LatencyUS int64           `json:"latency_us,omitempty"`
	Tokens    *messages.Usage `json:"tokens,omitempty"`
	Summary   string          `json:"summary"`
	Children  []*Step         `json:"children,omitempty"`
}

// BuildTimeline nests events under the event that caused them (by causation ID). An
// event whose cause is not in the session is a root. Every event is decoded, so a
// corrupt one is reported with its seq instead of being skipped.
func BuildTimeline(events []messages.Envelope) (*Timeline, error) {
	tl := &Timeline{SessionID: events[0].SessionID, Events: len(events)}
	var (
		latest           string // the status of the latest task.* event
		submitted, ended uint64
	)
	byID := make(map[string]*Step, len(events))
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			return nil, err
		}
		st := &Step{Seq: e.Seq, Type: e.Type, Actor: e.Actor, TS: e.TS, Summary: summary(p)}
		switch p := p.(type) {
		case *messages.ModelResponded:
			st.LatencyUS = p.LatencyUS
			u := p.Usage
			st.Tokens = &u
			tl.Usage = tl.Usage.Add(u)
		case *messages.ToolCallCompleted:
			st.LatencyUS = p.LatencyUS
		case *messages.TaskCompleted, *messages.TaskFailed:
			ended++
		case *messages.TaskSubmitted:
			submitted++
		}
		if status, ok := eventlog.TaskStatus(e.Type); ok {
			latest = status
		}
		if parent, ok := byID[e.CausationID]; ok && e.CausationID != e.ID {
			if st.LatencyUS == 0 && st.TS >= parent.TS {
				st.LatencyUS = st.TS - parent.TS
			}
			parent.Children = append(parent.Children, st)
		} else {
			tl.Roots = append(tl.Roots, st)
		}
		byID[e.ID] = st
	}
	tl.Status = eventlog.SessionStatus(latest, submitted, ended)
	return tl, nil
}

func summary(p messages.Payload) string {
	clip := func(s string) string {
		s = strings.ReplaceAll(s, "\n", " ")
		if len(s) > 120 {
			return s[:117] + "..."
		}
		return s
	}
	switch p := p.(type) {
	case *messages.TaskSubmitted:
		return "task: " + clip(p.Input)
	case *messages.ModelRequested:
		return fmt.Sprintf("ask %s (step %d, %d messages)", p.Model, p.Step, p.Messages)
	case *messages.ModelResponded:
		if p.Error != "" {
			return "error: " + clip(p.Error)
		}
		if len(p.Message.ToolCalls) > 0 {
			names := make([]string, len(p.Message.ToolCalls))
			for i, c := range p.Message.ToolCalls {
				names[i] = c.Name
			}
			return "call " + strings.Join(names, ", ")
		}
		return "answer: " + clip(p.Message.Content)
	case *messages.ToolCallRequested:
		return fmt.Sprintf("%s(%s)", p.Tool, clip(p.Arguments))
	case *messages.ToolCallCompleted:
		if p.Error != "" {
			return fmt.Sprintf("%s → error: %s", p.Tool, clip(p.Error))
		}
		return fmt.Sprintf("%s → %s", p.Tool, clip(p.Result))
	case *messages.TaskCompleted:
		return "completed: " + clip(p.Output)
	case *messages.TaskFailed:
		return fmt.Sprintf("failed (%s): %s", p.Reason, clip(p.Error))
	}
	return ""
}

// Render prints the timeline as an indented tree.
func (tl *Timeline) Render(w io.Writer) {
	fmt.Fprintf(w, "session %s  %s  %d events  tokens %d+%d\n", tl.SessionID, tl.Status, tl.Events, tl.Usage.PromptTokens, tl.Usage.CompletionTokens)
	var walk func(s *Step, depth int)
	walk = func(s *Step, depth int) {
		extra := ""
		if s.LatencyUS > 0 {
			extra += "  " + (time.Duration(s.LatencyUS) * time.Microsecond).String()
		}
		if s.Tokens != nil {
			extra += fmt.Sprintf("  %d+%d tokens", s.Tokens.PromptTokens, s.Tokens.CompletionTokens)
		}
		fmt.Fprintf(w, "%5d %s%-16s %-18s %s%s\n", s.Seq, strings.Repeat("  ", depth), s.Type, s.Actor, s.Summary, extra)
		for _, c := range s.Children {
			walk(c, depth+1)
		}
	}
	for _, r := range tl.Roots {
		walk(r, 0)
	}
}
