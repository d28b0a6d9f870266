package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/internal/cliflags"
	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/redact"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/notes"
)

const toolsUsage = `usage:
  node tools list [--json] [--config FILE] [--data DIR]
  node tools call [--config FILE] [--data DIR] NAME ['JSON-ARGS' | key=value,... | -]

list prints every tool the node's default agent can use: name, source (builtin,
mcp:SERVER or a2a:AGENT) and description; --json adds each input schema. The
skills are those of the configuration's skills_dir, or of TROUPE_SKILLS.
call runs one tool as the node would (its timeout, concurrency and size limits,
argument validation) and prints its result: exit 0, or 1 with the error. Arguments
are JSON or key=value pairs; - reads them from standard input; none means {}.
Tools beyond calculator and clock come from the "tools" section of the
configuration file (http_fetch, files, notes), the "memory" section ("tool": true
gives the memory tool), the "knowledge" section ("tool": true gives the rag tool) and its "chains" (tool chains: called here, a chain runs all
its steps in one call). The notes and the memories are those of the node's default
agent, in the event log of --data (or ClickHouse, when configured): a node serving
that data directory holds it locked meanwhile.
`

// toolsCmd runs "node tools ...": args are what follows "tools".
func toolsCmd(ctx context.Context, args []string, stdout, stderr io.Writer, opt options) int {
	if len(args) > 0 && helpArg(args[0]) {
		fmt.Fprint(stdout, toolsUsage)
		return 0
	}
	if len(args) == 0 || (args[0] != "list" && args[0] != "call") {
		fmt.Fprint(stderr, toolsUsage)
		return 2
	}
	sub := args[0]
	fs := flag.NewFlagSet("node tools "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // flagsFailed prints it
	configPath := fs.String("config", "", "configuration file")
	dataFlag := fs.String("data", "", "data directory of the embedded event log (the notes tool's)")
	asJSON := fs.Bool("json", false, "print JSON (list)")
	// Flags may come before or after the positional arguments.
	pos, err := cliflags.Parse(fs, args[1:])
	if err != nil {
		return flagsFailed(err, stdout, stderr, toolsUsage)
	}
	fc, err := loadConfig(configPath)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	// The default agent's tools: the built-ins and its skills' (then its notes', its
	// MCP servers' and its chains').
	// The files tool does not touch the node's own files, as the node's does not.
	protect := fc.Protected(cmp.Or(*dataFlag, os.Getenv("TROUPE_DATA"), fc.Data, ".troupe"),
		*configPath, cmp.Or(os.Getenv("TROUPE_AGENTS"), fc.AgentsFile))
	agent, logger, red, err := cliAgent(fc, opt, stderr, protect...)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	list := append(slices.Clone(agent.Tools), agent.Skills.Tools()...)
	// The memory tool ("memory": {"tool": true}) works on the memories of a node
	// built on the data directory, as node memory does; the notes then share its log.
	// The rag tool ("knowledge": {"tool": true}) works on the knowledge bases of the
	// memory tool's node, or of a node built on the data directory as node rag does.
	// Both are opened only for a call that reaches them: listing the tools, or
	// calling another, needs no data directory (nor one that no node serves), as
	// their specs come from memories and bases that are never read.
	reaches := func(ts []tools.Tool) bool {
		return sub == "call" && len(pos) > 0 && callReaches(pos[0], ts, agent.Chains)
	}
	var memLog eventlog.Log
	var memNode *node.Node
	var memTools, ragTools []tools.Tool
	memCfg, ragCfg := fc.Memory.ToolConfig(), fc.Knowledge.ToolConfig()
	if memCfg != nil {
		if memTools, err = node.MemoryToolSpecs(*memCfg, 0); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
	}
	if ragCfg != nil {
		box, err := node.RAGTool(nil, *ragCfg)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
		ragTools = []tools.Tool{box}
	}
	if memCfg != nil && reaches(memTools) {
		mems, closeMems, err := openCLIMemories(ctx, fc, *configPath, *dataFlag, "")
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		defer closeMems()
		if memTools, err = mems.Tools(*memCfg); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
		memLog, memNode = mems.n.Log(), mems.n
	}
	list = append(list, memTools...)
	if ragCfg != nil && reaches(ragTools) {
		bs, kbLog, closeKB, err := cliKnowledgeBases(ctx, fc, *configPath, *dataFlag, memNode)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		defer closeKB()
		box, err := node.RAGTool(bs, *ragCfg)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
		ragTools, memLog = []tools.Tool{box}, kbLog
	}
	list = append(list, ragTools...)
	if nc := agent.Notes; nc != nil {
		// The notes' log is opened only for a call that reaches the notes: listing the
		// tools, or calling another, works while a node serves the data directory.
		notesTools, err := node.NotesToolSpecs(*nc)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
		if memLog != nil || reaches(notesTools) {
			var closeLog func()
			notesTools, closeLog, err = cliNotes(ctx, fc, *dataFlag, *nc, memLog)
			if err != nil {
				fmt.Fprintln(stderr, "error:", err)
				return 1
			}
			defer closeLog()
		}
		list = append(list, notesTools...)
	}
	cfg := node.Config{Redactor: red}
	client, stopMCP, err := startMCP(ctx, fc.MCPServers, &cfg, logger)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	defer stopMCP()
	var catalog actors.ToolCatalog
	if client != nil {
		catalog = client
	}
	// The chains' steps call the tools above, as on a node (node.Config.Chains): the
	// notes' among them, and the MCP servers' through the catalog.
	chains, err := nodeconfig.ChainTools(list, agent.Chains, client)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	list = append(list, chains...)
	reg, err := tools.NewRegistry(list...)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	switch sub {
	case "list":
		if len(pos) != 0 {
			fmt.Fprint(stderr, toolsUsage)
			return 2
		}
		code := listTools(reg, catalog, red, *asJSON, stdout, stderr)
		if client != nil {
			// A server that is down is said, not hidden: its tools join when it is back.
			for _, st := range client.Status() {
				if st.State != mcp.StateConnected {
					fmt.Fprintf(stderr, "mcp server %s (%s) is %s: %s\n", st.Name, st.Transport, st.State, node.EscapeControls(red.String(st.Error)))
				}
			}
		}
		return code
	default:
		if len(pos) < 1 || len(pos) > 2 || *asJSON {
			fmt.Fprint(stderr, toolsUsage)
			return 2
		}
		arguments := ""
		if len(pos) == 2 {
			arguments = pos[1]
		}
		if arguments == "-" {
			stdin := opt.stdin
			if stdin == nil {
				stdin = os.Stdin
			}
			b, err := io.ReadAll(io.LimitReader(stdin, 64<<20))
			if err != nil {
				fmt.Fprintln(stderr, "error: reading the arguments:", err)
				return 2
			}
			arguments = string(b)
		}
		if t := strings.TrimSpace(arguments); t != "" && !strings.HasPrefix(t, "{") {
			// key=value pairs become a JSON object of strings, as the text protocol
			// makes them (llm/react); the tool coerces them to its schema's types.
			pairs, err := tools.ParsePairs(t)
			if err != nil {
				fmt.Fprintf(stderr, "error: the arguments are neither a JSON object nor key=value pairs: %v\n", err)
				return 2
			}
			b, _ := json.Marshal(pairs)
			arguments = string(b)
		}
		return callTool(ctx, reg, catalog, red, pos[0], arguments, stdout, stderr)
	}
}

// toolEntry is one tool in "node tools list --json".
type toolEntry struct {
	Name        string          `json:"name"`
	Source      string          `json:"source"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	SideEffects bool            `json:"side_effects"`
}

// listTools prints the tools of reg and catalog. What a tool says of itself (an MCP
// server's description and schema may name the token it was given) passes through
// red, as it does into the node's events.
func listTools(reg *tools.Registry, catalog actors.ToolCatalog, red *redact.Redactor, asJSON bool, stdout, stderr io.Writer) int {
	var entries []toolEntry
	specs := reg.Specs()
	if catalog != nil {
		specs = actors.Agent{Tools: specs, Catalog: catalog}.ToolSpecs()
	}
	for _, s := range specs {
		t, ok := reg.Get(s.Name)
		if !ok && catalog != nil {
			t, _ = catalog.Tool(s.Name)
		}
		schema := json.RawMessage(red.Bytes(s.Parameters))
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object"}`)
		} else if !json.Valid(schema) {
			// A secret that spanned JSON syntax: the schema is shown as the text it is.
			schema, _ = json.Marshal(string(schema))
		}
		entries = append(entries, toolEntry{Name: red.String(s.Name), Source: red.String(tools.SourceOf(t)), Description: red.String(s.Description),
			InputSchema: schema, SideEffects: tools.HasSideEffects(t)})
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(entries); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		return 0
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tSOURCE\tDESCRIPTION")
	for _, e := range entries {
		desc, _, _ := strings.Cut(e.Description, "\n")
		if len(desc) > 100 {
			desc = desc[:97] + "..."
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", node.EscapeControls(e.Name), node.EscapeControls(e.Source), node.EscapeControls(desc))
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	return 0
}

// callTool performs one call through actors.LocalEffects, the node's tool performer.
// Its result and error pass through red, as they do into the node's events.
func callTool(ctx context.Context, reg *tools.Registry, catalog actors.ToolCatalog, red *redact.Redactor, name, arguments string, stdout, stderr io.Writer) int {
	if _, ok := reg.Get(name); !ok {
		inCatalog := false
		if catalog != nil {
			_, inCatalog = catalog.Tool(name)
		}
		if !inCatalog {
			var names []string
			for _, s := range (actors.Agent{Tools: reg.Specs(), Catalog: catalog}).ToolSpecs() {
				names = append(names, red.String(s.Name))
			}
			fmt.Fprintf(stderr, "error: no tool %q; the tools are: %s\n", name, node.EscapeControls(strings.Join(names, ", ")))
			return 2
		}
	}
	effects := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: reg, Catalog: catalog})
	defer effects.Close()
	id := "cli-tools-" + actors.UUIDv7{}.NewID()
	key := messages.EffectKey{SessionID: id, Seq: 1}
	replies := make(chan messages.EffectReply, 1)
	effects.Perform(messages.EffectRequest{SessionID: id, Key: key, Tool: &messages.ToolCallRequested{
		Key: key.String(), CallID: "cli", Tool: name, Arguments: arguments}}, func(r messages.EffectReply) { replies <- r })
	var rep messages.EffectReply
	select {
	case rep = <-replies:
	case <-ctx.Done():
		effects.Cancel(key)
		rep = <-replies
	}
	// The result comes from outside (a page, a file, an MCP server): its terminal
	// controls are escaped, as replay show escapes them.
	if rep.Error != "" {
		fmt.Fprintln(stderr, "error:", node.EscapeControls(red.String(rep.Error)))
		return 1
	}
	fmt.Fprintln(stdout, node.EscapeControls(red.String(rep.Output)))
	return 0
}

// callReaches reports whether calling the tool name reaches one of ts: it is one of
// them, or a chain with a step that calls one.
func callReaches(name string, ts []tools.Tool, chains []tools.Chain) bool {
	reaches := func(n string) bool {
		return slices.ContainsFunc(ts, func(t tools.Tool) bool { return t.Spec().Name == n })
	}
	if reaches(name) {
		return true
	}
	for _, c := range chains {
		if c.Name == name && slices.ContainsFunc(c.Steps, func(s tools.ChainStep) bool { return reaches(s.Tool) }) {
			return true
		}
	}
	return false
}

// cliNotes builds the notes tool of "node tools" on the event log that run and
// serve use: ClickHouse when configured, else the SQLite log of data (default: the
// file's data, else .troupe), or shared, the log of the memory tool's node.
// closeLog closes what it opened.
func cliNotes(ctx context.Context, fc nodeconfig.File, data string, cfg notes.Config, shared eventlog.Log) (ts []tools.Tool, closeLog func(), err error) {
	if shared != nil {
		cfg.Log = shared
		cfg.Redact = redact.New(provider.Config{}.Secrets(nil)...).String
		n, err := notes.New(cfg)
		if err == nil {
			ts, err = n.Tools()
		}
		return ts, func() {}, err
	}
	or := func(vs ...string) string {
		for _, v := range vs {
			if v != "" {
				return v
			}
		}
		return ""
	}
	var log eventlog.Log
	log, err = openConfiguredLog(ctx, fc)
	if err != nil {
		return nil, nil, err
	}
	if log == nil {
		dir := or(data, os.Getenv("TROUPE_DATA"), fc.Data, ".troupe")
		if log, err = sqlite.Open(ctx, sqlite.Config{Dir: dir}); err != nil {
			return nil, nil, fmt.Errorf("the notes tool's event log in %s: %w", dir, err)
		}
	}
	cfg.Log = log
	cfg.Redact = redact.New(provider.Config{}.Secrets(nil)...).String // the environment's keys
	n, err := notes.New(cfg)
	if err == nil {
		ts, err = n.Tools()
	}
	if err != nil {
		_ = log.Close()
		return nil, nil, err
	}
	return ts, func() { _ = log.Close() }, nil
}

// cliAgent builds the default agent of configuration fc as a command that lists or
// checks tools does: with the extra tools of opt, logging warnings to stderr without
// the environment's keys and the MCP servers' secrets (a server's error names its URL).
// The files tool touches none of protect (nodeconfig.AgentOptions.Protect).
func cliAgent(fc nodeconfig.File, opt options, stderr io.Writer, protect ...string) (nodeconfig.Agent, *slog.Logger, *redact.Redactor, error) {
	red := redact.New(slices.Concat(provider.Config{}.Secrets(nil), nodeconfig.MCPSecrets(fc.MCPServers), nodeconfig.A2ASecrets(fc.A2AAgents))...)
	logger := slog.New(redact.NewHandler(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}), red))
	// TROUPE_SKILLS and TROUPE_DISCLOSURE replace the file's values, as they do for
	// node run and serve (whose --skills and --disclosure these commands lack) and
	// replay verify: the agent listed is the one the node runs.
	agent, err := fc.Agent(nodeconfig.AgentOptions{SkillsDir: os.Getenv("TROUPE_SKILLS"), Disclosure: os.Getenv("TROUPE_DISCLOSURE"),
		ExtraTools: opt.extraTools, Logger: logger, Protect: protect})
	return agent, logger, red, err
}
