package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/cliflags"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

func main() {
	ctx, stop := signalContext()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// signalContext is the context of a command, cancelled by an interrupt (Ctrl-C)
// or a termination (kill, a service manager's stop): the command stops as on an
// error, removing what it made (an import's temporary file), instead of dying.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

const usage = `usage:
  every command reads --data DIR (the embedded log, default .troupe) or --clickhouse HOST:PORT

  replay list [--data DIR] [--limit N] [--json]
  replay show <session-id> [--data DIR] [--json]
  replay verify <session-id> [--data DIR] [--config FILE] [--agents FILE] [--json] [--full]
  replay fork <session-id> --at SEQ [--data DIR] [--config FILE] [--agents FILE] [--model auto|offline|scripted:FILE|PROVIDER[:MODEL]] [--input TEXT] [--session NEW-ID] [--memory-writes]
  replay export <session-id> [--data DIR] [--out FILE]
  replay import <file|-> [--data DIR] [--unfinished refuse|park|resume]
  replay stats [--since 24h|2026-11-01] [--agent NAME] [--data DIR] [--json]
`

// commandUsage is each command's line of usage.
var commandUsage = map[string]string{
	"list":   "replay list [--data DIR] [--limit N] [--json]",
	"show":   "replay show <session-id> [--data DIR] [--json]",
	"verify": "replay verify <session-id> [--data DIR] [--config FILE] [--agents FILE] [--json] [--full]",
	"fork":   "replay fork <session-id> --at SEQ [--data DIR] [--config FILE] [--agents FILE] [--model auto|offline|scripted:FILE|PROVIDER[:MODEL]] [--input TEXT] [--session NEW-ID] [--memory-writes]",
	"export": "replay export <session-id> [--data DIR] [--out FILE]",
	"import": "replay import <file|-> [--data DIR] [--unfinished refuse|park|resume]",
	"stats":  "replay stats [--since 24h|2026-11-01] [--agent NAME] [--data DIR] [--json]",
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runIn(ctx, args, os.Stdin, stdout, stderr)
}

// runIn is run reading stdin where a command reads standard input (import -).
func runIn(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// The MCP client's goroutines log warnings to stderr while run writes its own
	// messages there.
	stdout, stderr = cliflags.Serialize(stdout, stderr)
	stderr = terminalText{stderr}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd := args[0]
	switch cmd {
	case "-h", "-help", "--help", "help":
		// Asked for, the usage is the answer: on stdout, exit 0, as node's.
		fmt.Fprint(stdout, usage)
		return 0
	}
	if _, ok := commandUsage[cmd]; !ok {
		fmt.Fprintf(stderr, "error: unknown command %q: want list, show, verify, fork, export, import or stats\n", cmd)
		fmt.Fprint(stderr, usage)
		return 2
	}
	// Each command has a flag set of its own flags, so that its usage lists them and
	// a flag of another command is an error.
	fs := flag.NewFlagSet("replay "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	printUsage := func(w io.Writer) {
		fmt.Fprintf(w, "usage:\n  %s\n\nflags:\n", commandUsage[cmd])
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	fs.Usage = func() {} // printed below: on stdout when asked for, else on stderr
	var (
		data, chAddr              string
		asJSON                    bool
		limit                     = 50
		at                        uint64
		modelFlag, input, newID   string
		outFile, since, agentFlag string
		configPath, agentsPath    string
		full, memoryWrites        bool
		unfinished                = unfinishedRefuse
	)
	fs.StringVar(&data, "data", envOr("TROUPE_DATA", ".troupe"), "data directory of the embedded event log")
	fs.StringVar(&chAddr, "clickhouse", envOr("TROUPE_CLICKHOUSE", ""), "read and write the ClickHouse event log at HOST:PORT instead")
	switch cmd {
	case "list", "show", "verify", "stats":
		fs.BoolVar(&asJSON, "json", false, "print JSON for machines")
	}
	switch cmd {
	case "verify", "fork":
		fs.StringVar(&configPath, "config", "", `the node's configuration file (as node serve's --config): the agent is the one it configures, with its tools, skills, tool disclosure, notes, chains, MCP servers, system prompt and max_steps`)
		fs.StringVar(&agentsPath, "agents", envOr("TROUPE_AGENTS", ""), `the node's agents file (as node serve's --agents; default the configuration's "agents_file"): the agents its tasks may name`)
	}
	switch cmd {
	case "verify":
		fs.BoolVar(&full, "full", false, "print a divergence's recorded and decided events whole, not clipped around their first difference (--json has them whole)")
	case "list":
		fs.IntVar(&limit, "limit", limit, "at most this many sessions (0: all); stderr says when there are more")
	case "fork":
		fs.Uint64Var(&at, "at", 0, "the last seq copied into the fork")
		fs.StringVar(&modelFlag, "model", envOr("TROUPE_MODEL", "auto"), "the model that continues the fork (auto, offline, scripted:FILE or PROVIDER[:MODEL])")
		fs.StringVar(&input, "input", "", "a task to run in the fork after it resumes")
		fs.StringVar(&newID, "session", "", "the new session's ID (default <parent>-fork-<n>)")
		fs.BoolVar(&memoryWrites, "memory-writes", false, "let the fork write the memory, knowledge bases and notes of --config (by default its memory, rag and notes tools read them, and their writes answer an error)")
	case "export":
		fs.StringVar(&outFile, "out", "", "write to this file instead of standard output")
	case "import":
		fs.StringVar(&unfinished, "unfinished", unfinished, "a session exported with tasks not ended (running, or waiting for an approval or a tool call), which the deployment it came from goes on with: "+
			"refuse imports nothing and names them; park imports it with them ended as cancelled, so that no node resumes it; "+
			"resume imports it as it is, for this log's nodes to go on with it, performing again the effects it has no answer of. A session whose tasks all ended imports the same way under each")
	case "stats":
		fs.StringVar(&since, "since", "", "only events since this long ago (e.g. 24h) or this date (2006-01-02 or RFC 3339)")
		fs.StringVar(&agentFlag, "agent", "", "only sessions of this agent")
	}
	// Flags may come before or after the session ID.
	positional, err := cliflags.Parse(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout)
		return 0
	}
	if err != nil {
		printUsage(stderr)
		return 2
	}
	want := 1 // the session ID, or import's file
	if cmd == "list" || cmd == "stats" {
		want = 0
	}
	if len(positional) != want {
		switch {
		case want == 0:
			fmt.Fprintf(stderr, "error: replay %s takes no arguments, got %q\n", cmd, positional)
		case len(positional) == 0 && cmd == "import":
			fmt.Fprintln(stderr, "error: replay import needs the file to import")
		case len(positional) == 0:
			fmt.Fprintf(stderr, "error: replay %s needs a session ID (replay list shows them)\n", cmd)
		default:
			fmt.Fprintf(stderr, "error: replay %s takes one argument, got %d: %q\n", cmd, len(positional), positional)
		}
		printUsage(stderr)
		return 2
	}
	st := store{data: data, clickhouse: chAddr, database: envOr("TROUPE_CLICKHOUSE_DATABASE", "troupe"), notices: stderr}
	switch cmd {
	case "fork":
		if at == 0 {
			fmt.Fprintln(stderr, "error: fork needs --at SEQ (the last event copied from the parent)")
			return 2
		}
		ac, err := loadAgent(ctx, configPath, agentsPath, data, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
		defer ac.stop()
		ac.memoryWrites = memoryWrites
		if err := ac.connected(); err != nil {
			fmt.Fprintf(stderr, "warning: %v; its tools join the fork's agent when it connects\n", err)
		}
		return fork(ctx, st, positional[0], at, modelFlag, input, newID, ac, stdout, stderr)
	case "import":
		switch unfinished {
		case unfinishedRefuse, unfinishedPark, unfinishedResume:
		default:
			fmt.Fprintf(stderr, "error: --unfinished %q: want refuse, park or resume\n", unfinished)
			printUsage(stderr)
			return 2
		}
		return importFile(ctx, st, positional[0], unfinished, stdin, stdout, stderr)
	}
	// verify's agent is built first: a bad --config is a usage error, whatever the log.
	ac := agentConfig{stop: func() {}}
	if cmd == "verify" {
		var err error
		if ac, err = loadAgent(ctx, configPath, agentsPath, data, stderr); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
		defer ac.stop()
		if err := ac.connected(); err != nil {
			// A recorded request holds only the hash of the tool schemas.
			fmt.Fprintf(stderr, "error: %v; verify needs the tool schemas of every configured MCP server: start it, or verify with a file without it\n", err)
			return 1
		}
	}
	log, err := st.open(ctx, reading)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer log.Close()
	switch cmd {
	case "list":
		return list(ctx, log, limit, asJSON, stdout, stderr)
	case "show":
		return show(ctx, log, positional[0], asJSON, stdout, stderr)
	case "verify":
		return verify(ctx, log, positional[0], ac, asJSON, full, stdout, stderr)
	case "export":
		return export(ctx, log, positional[0], outFile, stdout, stderr)
	default: // stats
		return stats(ctx, log, since, agentFlag, asJSON, stdout, stderr)
	}
}

// terminalText writes what it is given through node.EscapeControls. Replay's
// messages on stderr quote paths, addresses, IDs and flag values as the user typed
// them, and errors of the log or of MCP servers: none of it may act on the
// terminal (an ESC sequence in a --data path, say). Each message is written whole,
// in one Write, so no character is split between two.
type terminalText struct{ w io.Writer }

func (t terminalText) Write(p []byte) (int, error) {
	if _, err := io.WriteString(t.w, node.EscapeControls(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func list(ctx context.Context, log eventlog.Log, limit int, asJSON bool, stdout, stderr io.Writer) int {
	if limit < 0 {
		fmt.Fprintln(stderr, "error: --limit must be 0 (no bound) or more, not", limit)
		return 2
	}
	// One more than asked tells whether the list was cut, which stderr then says:
	// a cluster's log soon holds more sessions than the default shows.
	query := limit
	if limit > 0 && limit < math.MaxInt {
		query = limit + 1
	} else if limit == math.MaxInt {
		query = 0 // no bound: limit+1 would overflow
	}
	infos, err := log.Sessions(ctx, eventlog.Filter{Limit: query})
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	if limit > 0 && len(infos) > limit {
		infos = infos[:limit]
		fmt.Fprintf(stderr, "(the %d most recently started sessions only: --limit N shows more, --limit 0 all)\n", limit)
	}
	// The log's streams that are no sessions (notes, memory namespaces, knowledge
	// bases, push configs, sign-ins, stored effect commands, MCP clients' sessions)
	// are listed with their kind as status.
	node.MarkStreams(infos)
	if asJSON {
		if infos == nil {
			infos = []eventlog.SessionInfo{}
		}
		return writeJSON(stdout, stderr, infos)
	}
	// The PARENT column shows when a sub-agent's child session is listed.
	children := slices.ContainsFunc(infos, func(s eventlog.SessionInfo) bool { return s.Parent != "" })
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	header := "SESSION\tSTATUS\tSTEPS\tEVENTS\tSTARTED"
	if children {
		header += "\tPARENT"
	}
	fmt.Fprintln(tw, header)
	for _, s := range infos {
		line := fmt.Sprintf("%s\t%s\t%d\t%d\t%s", node.EscapeControls(s.ID), node.EscapeControls(s.Status), s.Steps, s.Events, time.UnixMicro(s.StartedUS).UTC().Format(time.RFC3339))
		if children {
			line += "\t" + node.EscapeControls(s.Parent)
		}
		fmt.Fprintln(tw, line)
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
	// A page at a time: the timeline keeps each event's step, not its payload.
	var b timelineBuilder
	err := (&sessionPages{log: log, id: id}).each(ctx, 0, b.add)
	if err == nil && b.tl == nil {
		fmt.Fprintf(stderr, "error: no session %s\n", node.QuoteHead(id))
		return 1
	}
	var tl *Timeline
	if err == nil {
		tl = b.timeline()
		err = tl.linkChildren(ctx, log)
	}
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
	// Parent is the session that delegated this one, a sub-agent's child session
	// (its first task's messages.TaskSubmitted.Parent); "" for any other.
	Parent string  `json:"parent,omitempty"`
	Roots  []*Step `json:"steps"`
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
	// TaskID, on a task.submitted event, is the client's name for the task
	// (its task_id), which the task's result carries; "" for a task sent unnamed.
	TaskID string `json:"task_id,omitempty"`
	// ChildSession, on a delegate call, is the child session it started (a
	// sub-agent's), when the log has it (linkChildren).
	ChildSession string `json:"child_session,omitempty"`
	// Context, on a model request, is the report of its context: what was sent
	// and dropped, within which budget (nil when it was recorded without one).
	Context  *messages.ContextReport `json:"context,omitempty"`
	Children []*Step                 `json:"children,omitempty"`
	// delegate is the key of a delegate call.
	delegate messages.EffectKey
}

// BuildTimeline nests events under the event that caused them (by causation ID). An
// event whose cause is not in the session is a root. Every event is decoded, so a
// corrupt one is reported with its seq instead of being skipped.
func BuildTimeline(events []messages.Envelope) (*Timeline, error) {
	var b timelineBuilder
	if err := b.add(events); err != nil {
		return nil, err
	}
	return b.timeline(), nil
}

// timelineBuilder is BuildTimeline of a session read a page at a time: add
// takes its next events, timeline is what they make.
type timelineBuilder struct {
	tl               *Timeline
	latest           string // the status of the latest task.* event
	submitted, ended uint64
	byID             map[string]*Step
}

func (b *timelineBuilder) add(events []messages.Envelope) error {
	if len(events) == 0 {
		return nil
	}
	if b.tl == nil {
		b.tl, b.byID = &Timeline{SessionID: events[0].SessionID}, map[string]*Step{}
	}
	tl := b.tl
	tl.Events += len(events)
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			return err
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
		case *messages.ModelRequested:
			st.Context = p.Context
		case *messages.TaskCompleted, *messages.TaskFailed:
			b.ended++
		case *messages.TaskSubmitted:
			b.submitted++
			st.TaskID = p.TaskID
			if b.submitted == 1 && e.Seq == 1 && p.Parent != nil {
				tl.Parent = p.Parent.SessionID
			}
		case *messages.ToolCallRequested:
			if p.Tool == node.DelegateTool {
				st.delegate, _ = messages.ParseEffectKey(p.Key)
			}
		}
		if status, ok := eventlog.TaskStatus(e.Type); ok {
			b.latest = status
		}
		if parent, ok := b.byID[e.CausationID]; ok && e.CausationID != e.ID {
			if st.LatencyUS == 0 && st.TS >= parent.TS {
				st.LatencyUS = st.TS - parent.TS
			}
			parent.Children = append(parent.Children, st)
		} else {
			tl.Roots = append(tl.Roots, st)
		}
		b.byID[e.ID] = st
	}
	return nil
}

// timeline is the timeline of the events added (nil for none).
func (b *timelineBuilder) timeline() *Timeline {
	tl := b.tl
	if tl == nil {
		return nil
	}
	// A stream of the log that is no session (an agent's notes, a memory namespace,
	// a knowledge base, a configuration, …) has its kind as status, as list gives it.
	info := []eventlog.SessionInfo{{ID: tl.SessionID, Status: eventlog.SessionStatus(b.latest, b.submitted, b.ended)}}
	node.MarkStreams(info)
	tl.Status = info[0].Status
	return tl
}

// finishNote says why a model stopped when its answer is not whole ("" for a whole one).
func finishNote(reason string) string {
	if reason == "" {
		return ""
	}
	return " [not finished: " + reason + "]"
}

// clip is a recorded text as a step's line shows it: on the line (its newlines
// spaces) and at most 120 bytes, cut at a character boundary. Every text of an
// event that summary and Render print goes through it, since any of it may come
// from a model, a tool, a client or an imported file; Render escapes the rest.
func clip(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 120 {
		cut := 117
		for cut > 0 && !utf8.RuneStart(s[cut]) { // not inside a character
			cut--
		}
		return s[:cut] + "..."
	}
	return s
}

func summary(p messages.Payload) string {
	switch p := p.(type) {
	case *messages.TaskSubmitted:
		if p.TaskID != "" {
			return "task " + clip(p.TaskID) + ": " + clip(p.Input)
		}
		return "task: " + clip(p.Input)
	case *messages.ModelRequested:
		if p.Purpose != "" {
			return fmt.Sprintf("ask %s to %s (step %d, %d messages)", clip(p.Model), clip(p.Purpose), p.Step, p.Messages)
		}
		return fmt.Sprintf("ask %s (step %d, %d messages)", clip(p.Model), p.Step, p.Messages)
	case *messages.ModelResponded:
		if p.Error != "" {
			return "error: " + clip(p.Error)
		}
		if len(p.Message.ToolCalls) > 0 {
			names := make([]string, len(p.Message.ToolCalls))
			for i, c := range p.Message.ToolCalls {
				names[i] = clip(c.Name)
			}
			return "call " + strings.Join(names, ", ") + finishNote(p.FinishReason)
		}
		return "answer: " + clip(p.Message.Content) + finishNote(p.FinishReason)
	case *messages.ToolCallRequested:
		if p.ChainStep != "" {
			return fmt.Sprintf("step %s: %s(%s)", clip(p.ChainStep), clip(p.Tool), clip(p.Arguments))
		}
		if p.Purpose != "" {
			return fmt.Sprintf("%s: %s(%s)", clip(node.PurposeLabel(p.Purpose, p.CallID)), clip(p.Tool), clip(p.Arguments))
		}
		return fmt.Sprintf("%s(%s)", clip(p.Tool), clip(p.Arguments))
	case *messages.ToolCallCompleted:
		if p.Error != "" {
			return fmt.Sprintf("%s → error: %s", clip(p.Tool), clip(p.Error)) + spentBy(p.Usage, "its sub-agent")
		}
		return fmt.Sprintf("%s → %s", clip(p.Tool), clip(p.Result)) + spentBy(p.Usage, "its sub-agent")
	case *messages.ApprovalRequested:
		return fmt.Sprintf("approval needed: %s(%s)", clip(p.Tool), clip(p.Arguments))
	case *messages.ApprovalResolved:
		verdict := "approved"
		if !p.Approve {
			verdict = "rejected"
		}
		if p.Reason != "" {
			verdict += ": " + clip(p.Reason)
		}
		return verdict + " (by " + clip(p.By) + ")"
	case *messages.TaskCompleted:
		if p.Note != "" {
			return "completed: " + clip(p.Output) + " (" + clip(p.Note) + ")" + spentBy(p.SubAgentsUsage, "its sub-agents")
		}
		return "completed: " + clip(p.Output) + spentBy(p.SubAgentsUsage, "its sub-agents")
	case *messages.TaskFailed:
		return fmt.Sprintf("failed (%s): %s", clip(p.Reason), clip(p.Error)) + spentBy(p.SubAgentsUsage, "its sub-agents")
	case *messages.SessionForked:
		if p.ShiftUS != 0 {
			return fmt.Sprintf("forked from %s at seq %d (its deadlines moved by %s)", clip(p.ParentID), p.AtSeq, time.Duration(p.ShiftUS)*time.Microsecond)
		}
		return fmt.Sprintf("forked from %s at seq %d", clip(p.ParentID), p.AtSeq)
	case *messages.TeamStateUpdated:
		return fmt.Sprintf("team state %s %s.%s by %s: %s", clip(p.Op), clip(p.Section), clip(p.Key), clip(p.By), clip(p.Value))
	case *messages.KBDocumentIngested:
		tokens := 0
		for _, c := range p.Chunks {
			tokens += c.Tokens
		}
		if p.Part == messages.KBKeyPart {
			// A key's mark: the document was stored already, unchanged.
			return fmt.Sprintf("document %s sent again unchanged under key %s (%s)", clip(p.Source), clip(p.Key), clip(p.Reason))
		}
		if p.Parts > 1 {
			// One of the events of a chunk set split across several.
			return fmt.Sprintf("document %s ingested (%s), part %d of %d: %d bytes, %d chunks, %d tokens, embedder %s",
				clip(p.Source), clip(p.Reason), p.Part, p.Parts, p.Bytes, len(p.Chunks), tokens, clip(p.Embedder))
		}
		return fmt.Sprintf("document %s ingested (%s): %d bytes, %d chunks, %d tokens, embedder %s",
			clip(p.Source), clip(p.Reason), p.Bytes, len(p.Chunks), tokens, clip(p.Embedder))
	case *messages.KBDocumentRemoved:
		return fmt.Sprintf("document %s removed (%s)", clip(p.Source), clip(p.Reason))
	case *messages.MemoryAdded:
		return fmt.Sprintf("added %s: %s", memoryRecord(p.Memory), memoryWhy(p.Reason, p.Key))
	case *messages.MemoryUpdated:
		return fmt.Sprintf("updated %s: %s", memoryRecord(p.Memory), memoryWhy(p.Reason, p.Key))
	case *messages.MemoryForgotten:
		return fmt.Sprintf("forgot %s: %s", clip(strings.Join(p.MemoryIDs, ", ")), memoryWhy(p.Reason, p.Key))
	case *messages.MemoryMerged:
		return fmt.Sprintf("merged %s into %s: %s", clip(strings.Join(p.Merged, ", ")), clip(p.Memory.MemoryID), memoryWhy(p.Reason, p.Key))
	case *messages.MemoryPromoted:
		return fmt.Sprintf("promoted %s from %s to %s: %s", clip(p.Memory.MemoryID), clip(p.From), clip(p.Memory.Tier), memoryWhy(p.Reason, p.Key))
	case *messages.MemoryDistilled:
		var from []string
		for _, s := range p.Memory.Sources {
			if s.Kind == "memory" {
				from = append(from, s.ID)
			}
		}
		return fmt.Sprintf("distilled %s into %s: %s", clip(strings.Join(from, ", ")), memoryRecord(p.Memory), memoryWhy(p.Reason, p.Key))
	case *messages.MemoryInvalidated:
		by := ""
		if p.By != "" {
			by = " by " + clip(p.By)
		}
		return fmt.Sprintf("invalidated %s%s: %s", clip(p.MemoryID), by, memoryWhy(p.Reason, p.Key))
	case *messages.MemoryCleared:
		tier := "every tier"
		if p.Tier != "" {
			tier = "the " + clip(p.Tier) + " tier"
		}
		return fmt.Sprintf("cleared %s: %s", tier, memoryWhy(p.Reason, p.Key))
	case *messages.MemoryBlockSet:
		return fmt.Sprintf("core block %s set: %s: %s", clip(p.Label), clip(p.Value), memoryWhy(p.Reason, p.Key))
	case *messages.MemoryBlockDeleted:
		return fmt.Sprintf("core block %s deleted: %s", clip(p.Label), memoryWhy(p.Reason, p.Key))
	case *messages.MemoryRemembered:
		// A turn's write after task that wrote nothing: its reason and the
		// turn's key, which no memory's history lists. Or an Add under a
		// client's key whose every memory was stored already: the record of
		// the key's request, shown under the key the client sent (as a
		// memory's history shows it), not with its request's digest.
		if client, ok := memory.ClientKey(p.Key); ok {
			return fmt.Sprintf("%s (the request of key %s)", clip(p.Reason), clip(client))
		}
		return fmt.Sprintf("%s (%s)", clip(p.Reason), clip(p.Key))
	}
	return ""
}

// memoryRecord names a memory as a change left it: its ID, tier and content.
func memoryRecord(m messages.MemoryRecord) string {
	return fmt.Sprintf("%s (%s): %s", clip(m.MemoryID), clip(m.Tier), clip(m.Content))
}

// memoryWhy says why a memory changed and under which key (the session's event,
// the client's request or the consolidation run that made the change), the key
// as a memory's history shows it: a client's, without its request's digest.
func memoryWhy(reason, key string) string {
	if key == "" {
		return clip(reason)
	}
	key, _ = memory.ClientKey(key)
	return fmt.Sprintf("%s (%s)", clip(reason), clip(key))
}

// linkChildren names, on each delegate call of the timeline, the child session it
// started: the session node.ChildSessionID derives from the call's key, when the
// log has it and its first task names the call as its parent.
func (tl *Timeline) linkChildren(ctx context.Context, log eventlog.Log) error {
	var walk func(steps []*Step) error
	walk = func(steps []*Step) error {
		for _, s := range steps {
			if !s.delegate.IsZero() {
				id := node.ChildSessionID(s.delegate)
				events, err := eventlog.ReadPage(ctx, log, id, 1, 1)
				if err != nil {
					return err
				}
				if len(events) > 0 {
					if p, err := events[0].Decode(); err == nil {
						if t, ok := p.(*messages.TaskSubmitted); ok && t.Parent != nil && t.Parent.Key == s.delegate.String() {
							s.ChildSession = id
							s.Summary += " → child session " + id
						}
					}
				}
			}
			if err := walk(s.Children); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(tl.Roots)
}

// Render prints the timeline as an indented tree, for a human: its text goes
// through node.EscapeControls, so that what a task or a model said cannot act on the
// terminal. (The JSON form carries it as recorded.)
func (tl *Timeline) Render(w io.Writer) {
	parent := ""
	if tl.Parent != "" {
		parent = "  child of " + clip(tl.Parent)
	}
	fmt.Fprint(w, node.EscapeControls(fmt.Sprintf("session %s  %s  %d events  tokens %d+%d%s\n", tl.SessionID, tl.Status, tl.Events, tl.Usage.PromptTokens, tl.Usage.CompletionTokens, parent)))
	// Depth-first with a stack of its own, each step indented by its depth in the
	// causation chain up to maxNest levels: a chain deeper than that (an imported
	// file's, each event caused by the one before) goes on at that depth, so that a
	// line's length and the output's size do not grow with the square of its events.
	type frame struct {
		s     *Step
		depth int
	}
	stack := make([]frame, 0, len(tl.Roots))
	for i := len(tl.Roots) - 1; i >= 0; i-- {
		stack = append(stack, frame{tl.Roots[i], 0})
	}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		s, depth := f.s, min(f.depth, maxNest)
		extra := ""
		if s.LatencyUS > 0 {
			extra += "  " + (time.Duration(s.LatencyUS) * time.Microsecond).String()
		}
		if s.Tokens != nil {
			extra += fmt.Sprintf("  %d+%d tokens", s.Tokens.PromptTokens, s.Tokens.CompletionTokens)
		}
		fmt.Fprint(w, node.EscapeControls(fmt.Sprintf("%5d %s%-16s %-18s %s%s\n", s.Seq, strings.Repeat("  ", depth), s.Type, clip(s.Actor), s.Summary, extra)))
		if s.Context != nil {
			renderContext(w, s.Context, "      "+strings.Repeat("  ", depth+1))
		}
		for i := len(s.Children) - 1; i >= 0; i-- {
			stack = append(stack, frame{s.Children[i], f.depth + 1})
		}
	}
}

// maxNest is the deepest level replay show indents a step to (the dashboard's too).
const maxNest = 24

// spentBy says what who spent on models (u), "" when nothing: " [its sub-agents
// spent 900 tokens, $0.0120]".
func spentBy(u messages.Usage, who string) string {
	if u.IsZero() {
		return ""
	}
	out := fmt.Sprintf(" [%s spent %d tokens", who, u.Tokens())
	if u.CostUSD != 0 {
		out += fmt.Sprintf(", $%.4f", u.CostUSD)
	}
	return out + "]"
}
