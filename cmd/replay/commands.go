package main

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/cliflags"
	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	pctx "github.com/troupe-run/troupe/pipelines/context"
	"github.com/troupe-run/troupe/redact"
	"github.com/troupe-run/troupe/telemetry"
)

// agentConfig is the default agent of the node configuration file of --config, as
// node run and serve build it (internal/nodeconfig), with its MCP servers' catalog.
type agentConfig struct {
	file  nodeconfig.File
	agent nodeconfig.Agent
	// agents are the agents file's (none without one).
	agents nodeconfig.AgentsFile
	// catalog is the client of the file's MCP servers; nil without any.
	catalog *mcp.Client
	// secrets are the servers' header values and secret environment values.
	secrets []string
	stop    func()
	// memoryWrites lets a fork write the memory and knowledge bases of the file
	// (replay fork --memory-writes); without it their writes are refused.
	memoryWrites bool
}

// forkWritesRefused is why a fork's memory, knowledge base and notes writes are
// refused (agentConfig.memoryWrites): they are the log's and the stores' the
// served node uses, which a fork made to look into a session must not change.
const forkWritesRefused = "this is a replay fork: it reads the memory, the knowledge bases and the notes of --config but does not change them (replay fork --memory-writes lets it)"

// loadAgent builds the agent of the node configuration file at path; with no path,
// the node's default agent (calculator and clock). TROUPE_SKILLS and
// TROUPE_DISCLOSURE replace the file's skills_dir and disclosure, as they do for node
// serve. The file's MCP servers are connected to, waiting up to mcpWait for each:
// their tool schemas are in the recorded prompts, and a recorded request holds only
// their hash. A bad file is an error naming the field; stop closes the connections.
//
// The agents file at agentsPath (default: the file's agents_file) adds the agents
// tasks may name, as on a node.
//
// data is the data directory of the event log ("" when none): the agent's files
// tool touches neither it nor the node's configuration, agents, tokens and secret
// key files, as the node's does not (nodeconfig.AgentOptions.Protect).
func loadAgent(ctx context.Context, path, agentsPath, data string, stderr io.Writer) (agentConfig, error) {
	ac := agentConfig{stop: func() {}}
	fc, err := nodeconfig.Load(path) // none when path is empty: the node's defaults
	if err != nil {
		return ac, fmt.Errorf("--%w", err)
	}
	ac.file = fc
	where := "--config " + path + ": "
	if path == "" {
		where = ""
	}
	// Its warnings (an MCP server's error names its URL) keep the secrets out, as the node's do.
	red := redact.New(slices.Concat(provider.Config{}.Secrets(nil), nodeconfig.MCPSecrets(fc.MCPServers), nodeconfig.A2ASecrets(fc.A2AAgents),
		telemetry.EnvSecrets())...)
	logger := slog.New(redact.NewHandler(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}), red))
	// A fork's node exports its spans as a node's does (OTEL_*): what the exporter
	// reports goes here too, redacted, not to the standard log package.
	telemetry.LogErrors(logger)
	if ac.agent, err = fc.Agent(nodeconfig.AgentOptions{SkillsDir: os.Getenv("TROUPE_SKILLS"), Disclosure: os.Getenv("TROUPE_DISCLOSURE"),
		Logger: logger, Protect: fc.Protected(data, path, cmp.Or(agentsPath, fc.AgentsFile))}); err != nil {
		return ac, fmt.Errorf("%s%w", where, err)
	}
	ac.catalog, ac.stop, err = nodeconfig.ConnectMCP(ctx, fc.MCPServers, mcpWait, logger, red)
	if err != nil {
		return ac, fmt.Errorf("%s%w", where, err)
	}
	ac.secrets = nodeconfig.MCPSecrets(fc.MCPServers)
	// What node serve checks before it starts, verify and fork check too.
	var cfg node.Config
	ac.apply(&cfg)
	if err := cfg.Validate(); err != nil {
		ac.stop()
		return agentConfig{stop: func() {}}, fmt.Errorf("%s%w", where, err)
	}
	if agentsPath = cmp.Or(agentsPath, fc.AgentsFile); agentsPath != "" {
		if ac.agents, err = nodeconfig.LoadAgents(agentsPath); err == nil {
			err = ac.agents.CheckNodeTools(cfg)
		}
		if err != nil {
			ac.stop()
			return agentConfig{stop: func() {}}, err
		}
	}
	return ac, nil
}

// mcpWait bounds the wait for each MCP server's first connection, as on a node.
const mcpWait = 10 * time.Second

// connected reports the first of the MCP servers that is not connected, naming it.
func (ac agentConfig) connected() error {
	if ac.catalog == nil {
		return nil
	}
	for _, st := range ac.catalog.Status() {
		if st.State != mcp.StateConnected {
			why := st.Error
			if why == "" {
				why = fmt.Sprintf("not connected after %s", mcpWait)
			}
			return fmt.Errorf("mcp server %s (%s) is %s: %s", st.Name, st.Transport, st.State, why)
		}
	}
	return nil
}

// stores sets cfg's agent memory and knowledge bases from the file's "memory"
// and "knowledge" sections, as node run builds them (the vectors in Milvus with
// TROUPE_MILVUS or the section's milvus, else in the data directory); a file with
// neither sets nothing. close releases them.
func (ac agentConfig) stores(ctx context.Context, cfg *node.Config) (close func(), err error) {
	var closers []func() error
	close = func() {
		for _, c := range closers {
			c()
		}
	}
	milvus := os.Getenv("TROUPE_MILVUS")
	if ac.file.Memory != nil {
		memCfg, closeVectors, key, err := ac.file.MemoryConfig(ctx, milvus)
		if err != nil {
			return close, err
		}
		closers = append(closers, closeVectors)
		cfg.Memory, cfg.Secrets = &memCfg, append(cfg.Secrets, key)
		cfg.MemoryWriteAfterTask = cfg.MemoryTool != nil && ac.file.Memory.WriteAfterTask
	}
	if ac.file.Knowledge != nil {
		kbCfg, closeVectors, key, err := ac.file.KnowledgeConfig(ctx, milvus)
		if err != nil {
			close()
			return func() {}, err
		}
		closers = append(closers, closeVectors)
		cfg.Knowledge, cfg.Secrets = &kbCfg, append(cfg.Secrets, key)
	}
	return close, nil
}

// apply sets cfg's agents and its MCP catalog.
func (ac agentConfig) apply(cfg *node.Config) {
	ac.agent.Apply(cfg)
	if len(ac.agents.Agents) > 0 {
		cfg.Agents = ac.agents.NodeAgents()
	}
	if ac.catalog != nil {
		cfg.ToolCatalog = ac.catalog
		cfg.Secrets = append(cfg.Secrets, ac.secrets...)
	}
}

// sessionExists returns an error unless log holds session id, read from its
// first event alone on a log that reads pages.
func sessionExists(ctx context.Context, log eventlog.Log, id string) error {
	first, err := eventlog.ReadPage(ctx, log, id, 1, 1)
	if err != nil {
		return err
	}
	if len(first) == 0 {
		return fmt.Errorf("no session %s", node.QuoteHead(id))
	}
	return nil
}

// verifyResult is the JSON form of replay verify.
type verifyResult struct {
	SessionID     string             `json:"session_id"`
	Deterministic bool               `json:"deterministic"`
	Events        int                `json:"events"`
	Divergence    *actors.Divergence `json:"divergence,omitempty"`
	// UnsupportedRules names the task recorded under decision rules this build
	// does not have (actors.ContextRules): the session was not re-decided.
	UnsupportedRules *actors.RulesError `json:"unsupported_rules,omitempty"`
	// Undecidable names the task the agents given cannot re-decide: they fail it
	// for a limit of their own (an agent they do not define, a secret of its
	// recorded prompt they do not hold) where the session recorded a decision.
	Undecidable *actors.UndecidableError `json:"undecidable,omitempty"`
	// RecordedLimits are the tasks that the node recording them failed for a limit
	// of its own (unknown_agent, unsupported_rules, a lost secret): their failures
	// are taken as recorded, not re-decided.
	RecordedLimits []actors.LimitFailure `json:"recorded_limits,omitempty"`
	Error          string                `json:"error,omitempty"`
	// From, on a fork, is the seq of its session.forked event: the events from it
	// on are the fork's own and re-decided; those before are Parent's, copied.
	From   uint64 `json:"from,omitempty"`
	Parent string `json:"parent,omitempty"`
	// NoSession is the kind of a stream of the log that is no session (as list's
	// status names it: notes, mcp-session, ...): it was not verified.
	NoSession string `json:"no_session,omitempty"`
}

// streamKind is the status a listing gives id when it is a stream of the log but
// no session (node.MarkStreams), "" for a session.
func streamKind(id string) string {
	infos := []eventlog.SessionInfo{{ID: id}}
	node.MarkStreams(infos)
	return infos[0].Status
}

// exitCannotVerify is verify's exit code for a session it cannot re-decide: a task
// was recorded under decision rules this build does not have
// (exitUnsupportedRules), or the agents given fail a task for a limit of their own
// where the session recorded a decision (actors.UndecidableError). It is no
// divergence (exit 1).
const exitCannotVerify = 3

// exitUnsupportedRules is exitCannotVerify for decision rules this build lacks.
const exitUnsupportedRules = exitCannotVerify

// verify re-runs the agents' decisions (each task's, by the name it recorded)
// against the recorded session. No model
// is called and no tool runs: every result comes from the log. A divergence's
// events are printed clipped around their first difference, whole with full (and
// in JSON).
func verify(ctx context.Context, log eventlog.Log, id string, ac agentConfig, asJSON, full bool, stdout, stderr io.Writer) int {
	// The session is read a page at a time, never whole: a first reading counts
	// its events and finds what verify needs before it re-decides them (the
	// configurations its tasks name, its fork point, its agents); the next ones
	// stop at the events it counted: a second finds its models and tools and
	// checks it whole, a third re-decides it (a fourth for each task of no
	// recorded rules version that diverges under the first assumed).
	pages := &sessionPages{log: log, id: id}
	scan := verifyScan{from: 1}
	err := pages.each(ctx, 0, func(page []messages.Envelope) error {
		scan.add(page)
		return nil
	})
	if err == nil && scan.n == 0 {
		err = fmt.Errorf("no session %s", node.QuoteHead(id))
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	n := scan.n
	if kind := streamKind(id); kind != "" {
		// No task ran there: nothing was decided, nothing is re-decided.
		if asJSON {
			return writeJSON(stdout, stderr, verifyResult{SessionID: id, Events: n, NoSession: kind})
		}
		fmt.Fprintf(stdout, "%s: not verified: a stream of the log (%s), no session: no task ran there to re-decide\n", id, kind)
		return 0
	}
	var cfg node.Config
	ac.apply(&cfg)
	// The notes tool is the node's to build on its log (node.Config.Notes); verify
	// builds it on the log it reads, for its schemas: no tool is called.
	cfg.Tools, err = withNotes(cfg.Tools, ac.agent.Notes, log)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	agents, err := cfg.AllAgents()
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	configs, err := actors.LoadConfigs(ctx, log, scan.digests)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	// The models the session recorded, and the tools it called that the agents
	// lack; and the first reading of actors.VerifyPages (its seqs whole, its
	// tasks' rules), on the same pages. This is a second reading, not the first:
	// the models from a fork on need its fork point, and the tools the agents,
	// which are built only once the first found a session. The third, the fold,
	// needs what this one finds before its first event is re-decided.
	fromFirst, fromFork := newModelsSeen(1), newModelsSeen(scan.from)
	tools := toolsSeen{agents: agents}
	tools.agent, tools.known = agents.For("")
	checked := actors.NewVerifyScan()
	err = pages.each(ctx, n, func(page []messages.Envelope) error {
		fromFirst.add(page)
		fromFork.add(page)
		tools.add(page)
		checked.Add(page)
		return nil
	})
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	from, parent := scan.from, scan.parent
	read := actors.Pages(func(fn func(page []messages.Envelope) error) error { return pages.each(ctx, n, fn) })
	rep, err := actors.VerifyScanned(withRecordedModels(agents, ac, fromFirst, fromFork, from), read, checked, from, configs)
	div := rep.Divergence
	unknown := unknownAgents(scan.agents, agents)
	if ue, ok := errors.AsType[*actors.UndecidableError](err); ok {
		if asJSON {
			res := verifyResult{SessionID: id, Events: n, Undecidable: ue, Error: ue.Error()}
			if code := writeJSON(stdout, stderr, res); code != 0 {
				return code
			}
		} else {
			fmt.Fprint(stdout, node.EscapeControls(fmt.Sprintf("session %s: cannot verify: %v\n", id, ue)))
			if len(unknown) > 0 {
				fmt.Fprint(stderr, node.EscapeControls(fmt.Sprintf("hint: the session ran %s, which neither --agents nor --config defines here: verify it with the agents file it ran with\n",
					quotedList("agent", unknown))))
			} else {
				fmt.Fprintln(stderr, "hint: verify it with the configuration and agents file it ran with (--config, --agents), its prompts' secrets and all")
			}
		}
		return exitCannotVerify
	}
	if re, ok := errors.AsType[*actors.RulesError](err); ok {
		// Not a divergence: this build cannot re-decide the task at all.
		if asJSON {
			res := verifyResult{SessionID: id, Events: n, UnsupportedRules: re, Error: re.Error()}
			if code := writeJSON(stdout, stderr, res); code != 0 {
				return code
			}
		} else {
			fmt.Fprintf(stdout, "session %s: cannot verify: %v\n", id, re)
		}
		return exitUnsupportedRules
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	res := verifyResult{SessionID: id, Deterministic: div == nil, Events: n, Divergence: div, RecordedLimits: rep.Limits}
	if parent != "" {
		res.From, res.Parent = from, parent
	}
	if asJSON {
		if code := writeJSON(stdout, stderr, res); code != 0 {
			return code
		}
	} else if div == nil && parent != "" {
		fmt.Fprint(stdout, node.EscapeControls(fmt.Sprintf("session %s: deterministic (its %d events from seq %d re-decided against their recorded results; the %d before are %s's, as replay fork copied them: verify %s for those)\n",
			id, n-int(from)+1, from, from-1, parent, parent)))
	} else if div == nil {
		fmt.Fprintf(stdout, "session %s: deterministic (%d events re-decided against their recorded results)\n", id, n)
	} else {
		// Clipped around the first difference unless --full: a payload may be megabytes.
		text := div.String()
		if full {
			text = div.Whole()
		} else if text != div.Whole() {
			text = strings.TrimSuffix(text, ")") + "; --full prints them whole)"
		}
		fmt.Fprint(stdout, node.EscapeControls(fmt.Sprintf("session %s %s\n", id, text)))
	}
	if !asJSON {
		printLimits(stdout, rep.Limits)
	}
	if div != nil {
		if len(unknown) > 0 && !asJSON {
			fmt.Fprint(stderr, node.EscapeControls(fmt.Sprintf("hint: the session ran %s, which neither --agents nor --config defines here: verify it with the agents file it ran with\n",
				quotedList("agent", unknown))))
		} else if missing := tools.missing(); len(missing) > 0 && !asJSON {
			fmt.Fprint(stderr, node.EscapeControls(fmt.Sprintf("hint: the session called %s, which the agent verified here does not have: verify it with the configuration it ran with (--config, --agents)\n",
				quotedList("tool", missing))))
		} else if servers := slices.Sorted(maps.Keys(ac.file.MCPServers)); len(servers) > 0 && !asJSON &&
			strings.HasPrefix(div.Expected, string(messages.TypeModelRequested)+" ") {
			// A request's prompt hash covers the MCP servers' tools as verify found
			// them now (and, under the catalog disclosure, the system prompt's lines
			// naming them), not as the session saw them.
			fmt.Fprint(stderr, node.EscapeControls(fmt.Sprintf("hint: a request's prompt hash covers the tool schemas of the MCP servers, as they are now (%s): if one's tools changed since the session ran, the prompt does too; verify against the servers as they were then\n",
				quotedList("MCP server", servers))))
		}
		return 1
	}
	return 0
}

// verifyScan is what verify finds in a first reading of a session, a page at a
// time: its events counted, the configurations its tasks name (sorted), the
// agents they name (sorted), and its last session.forked event's seq (from,
// else 1) and parent.
type verifyScan struct {
	n       int
	digests []string
	agents  []string
	from    uint64
	parent  string
}

func (s *verifyScan) add(page []messages.Envelope) {
	s.n += len(page)
	s.digests = addDigests(s.digests, actors.NamedConfigs(page))
	for _, e := range page {
		switch e.Type {
		case messages.TypeSessionForked:
			if p, err := e.Decode(); err == nil {
				s.from, s.parent = e.Seq, p.(*messages.SessionForked).ParentID
			}
		case messages.TypeTaskSubmitted:
			if p, err := e.Decode(); err == nil {
				s.agents = addDigests(s.agents, []string{p.(*messages.TaskSubmitted).Agent})
			}
		}
	}
}

// printLimits says of each task failure verify took as recorded why it did.
func printLimits(w io.Writer, limits []actors.LimitFailure) {
	for _, f := range limits {
		fmt.Fprint(w, node.EscapeControls(fmt.Sprintf("  taken as recorded: %s; not re-decided past it\n", f)))
	}
}

// withRecordedModels returns a copy of agents on the models the session
// recorded from seq from on (fromFrom, its models from that seq; whole, from its
// first): each agent's own (an agent may have a model of its own), else the
// first; an agent that made no call from there is on the one it recorded before.
// A fork re-decides its own part only, from its session.forked event on: it ran
// on the node that continued the fork, on its models (replay fork --model).
func withRecordedModels(agents actors.Agents, ac agentConfig, whole, fromFrom *modelsSeen, from uint64) actors.Agents {
	first, byAgent, summaries := whole.result()
	if from > 1 {
		f, b, s := fromFrom.result()
		first = cmp.Or(f, first)
		maps.Copy(byAgent, b)
		maps.Copy(summaries, s)
	}
	agents.Named = maps.Clone(agents.Named)
	agents.Default.Model = cmp.Or(byAgent["default"], first)
	summarySpecs := map[string]string{}
	for _, d := range ac.agents.Agents {
		summarySpecs[d.Name] = d.Context.SummaryModel
	}
	for name, a := range agents.Named {
		a.Model = cmp.Or(byAgent[name], first)
		a.Context.Compression.Model = summaryModel(summarySpecs[name], summaries[name], a.Context.Compression.Model)
		if p, ok := a.Paradigm.(actors.Reflection); ok {
			// The critic's model, as recorded, when it is not the agent's.
			p.CriticModels = nil
			if c := byAgent[name+"/"+actors.PurposeCritique]; c != "" && c != a.Model {
				p.CriticModels = []string{c}
			}
			a.Paradigm = p
		}
		agents.Named[name] = a
	}
	return agents
}

// unknownAgents lists, sorted, the agents of names (those the session's tasks
// named, sorted) that agents lacks: a verify without the agents file they ran
// with diverges at their first task, and says why in a hint.
func unknownAgents(names []string, agents actors.Agents) []string {
	var out []string
	for _, name := range names {
		if _, ok := agents.For(name); !ok {
			out = append(out, name)
		}
	}
	return out
}

// missingTools names the tools that performed calls of the session's tasks, a
// knowledge base's evidence or memories gathered before a first model call among
// them, and that the agent of the task lacks here: verified without the
// configuration whose "knowledge" or "memory" section gave it rag or memory, the
// agent gathers nothing and diverges at the first gathering. A call the session
// answered itself (a tool the model made up, answered as unknown) names none.
func missingTools(events []messages.Envelope, agents actors.Agents) []string {
	t := toolsSeen{agents: agents}
	t.agent, t.known = agents.For("")
	t.add(events)
	return t.missing()
}

// toolsSeen is missingTools of a session read a page at a time.
type toolsSeen struct {
	agents actors.Agents
	agent  actors.Agent // of the task the events are of
	known  bool
	out    []string
}

func (t *toolsSeen) add(events []messages.Envelope) {
	for _, e := range events {
		if e.Type != messages.TypeTaskSubmitted && (e.Type != messages.TypeToolCallCompleted || e.Actor == "session") {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			continue
		}
		switch p := p.(type) {
		case *messages.TaskSubmitted:
			t.agent, t.known = t.agents.For(p.Agent)
		case *messages.ToolCallCompleted:
			if t.known && !agentHas(t.agent, p.Tool) && !slices.Contains(t.out, p.Tool) {
				t.out = append(t.out, p.Tool)
			}
		}
	}
}

// missing is the tools named so far, sorted.
func (t *toolsSeen) missing() []string {
	out := slices.Clone(t.out)
	slices.Sort(out)
	return out
}

// agentHas reports whether a has the tool name, of its own or of its catalog.
func agentHas(a actors.Agent, name string) bool {
	for _, t := range a.Tools {
		if t.Name == name {
			return true
		}
	}
	if a.Catalog != nil {
		_, ok := a.Catalog.Tool(name)
		return ok
	}
	return false
}

// quotedList is "agent "a"" or "agents "a", "b"".
func quotedList(noun string, names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	if len(names) > 1 {
		noun += "s"
	}
	return noun + " " + strings.Join(q, ", ")
}

// summaryModel is the name of the model an agent's compression calls go to in
// verify, from its summary_model spec (an agents file's), the model of the
// agent's first recorded compression call (recorded, "" for none) and what the
// agent was built with (built: none, or "" for the agent's own model). A node
// resolves the spec to a model and names its calls by the model's name, which
// verify, calling no model, takes from the recording, as it takes the agent's
// own. A session that made no such call needs only to know whether the model can
// summarise, which the spec says: offline (llm.OfflineName) cannot, any other can.
func summaryModel(spec, recorded, built string) string {
	switch {
	case spec == "" || spec == actors.NoSummaryModel:
		return built
	case recorded != "":
		return recorded
	}
	return spec
}

// recordedModels returns the model of the first model.requested of events' loops,
// and the first of each agent's tasks (task.submitted's agent: "default" for none),
// by agent; and the first of each purpose of a paradigm's calls, by
// "<agent>/<purpose>". An agent whose every call has a purpose (plan_execute's, but
// for goal steps) counts its first such call's model as its own. summaries is the
// model of each agent's first compression call (a summary, digest, extraction,
// compaction), by agent. Only the calls from seq from on count.
func recordedModels(events []messages.Envelope, from uint64) (first string, byAgent, summaries map[string]string) {
	m := newModelsSeen(from)
	m.add(events)
	return m.result()
}

// modelsSeen is recordedModels of a session read a page at a time.
type modelsSeen struct {
	from               uint64
	first, firstAny    string
	byAgent, summaries map[string]string
	agentOf            map[string]string // task ID -> agent
	anyOrder           []string          // agents in the order of their first call with a purpose
	anyModel           map[string]string // agent -> the model of that call
}

func newModelsSeen(from uint64) *modelsSeen {
	return &modelsSeen{from: from, byAgent: map[string]string{}, summaries: map[string]string{}, agentOf: map[string]string{}, anyModel: map[string]string{}}
}

// result is recordedModels of the events added.
func (m *modelsSeen) result() (first string, byAgent, summaries map[string]string) {
	byAgent = maps.Clone(m.byAgent)
	for _, agent := range m.anyOrder {
		if byAgent[agent] == "" {
			byAgent[agent] = m.anyModel[agent]
		}
	}
	return cmp.Or(m.first, m.firstAny), byAgent, maps.Clone(m.summaries)
}

func (m *modelsSeen) add(events []messages.Envelope) {
	for _, e := range events {
		switch e.Type {
		case messages.TypeTaskSubmitted:
			if p, err := e.Decode(); err == nil {
				m.agentOf[e.ID] = cmp.Or(p.(*messages.TaskSubmitted).Agent, "default")
			}
		case messages.TypeModelRequested:
			if e.Seq < m.from {
				continue
			}
			p, err := e.Decode()
			if err != nil {
				continue
			}
			mr := p.(*messages.ModelRequested)
			if pctx.IsCompressPurpose(mr.Purpose) {
				// Compression's calls go to the agent's summary model.
				if agent, ok := m.agentOf[e.CorrelationID]; ok && m.summaries[agent] == "" {
					m.summaries[agent] = mr.Model
				}
				continue
			}
			if mr.Purpose != "" {
				// A paradigm's call may go to a model of its own (a critic's): by
				// "<agent>/<purpose>".
				if agent, ok := m.agentOf[e.CorrelationID]; ok && m.byAgent[agent+"/"+mr.Purpose] == "" {
					m.byAgent[agent+"/"+mr.Purpose] = mr.Model
				}
				if agent, ok := m.agentOf[e.CorrelationID]; ok && m.anyModel[agent] == "" {
					m.anyModel[agent] = mr.Model
					m.anyOrder = append(m.anyOrder, agent)
				}
				m.firstAny = cmp.Or(m.firstAny, mr.Model)
				continue
			}
			if m.first == "" {
				m.first = mr.Model
			}
			if agent, ok := m.agentOf[e.CorrelationID]; ok && m.byAgent[agent] == "" {
				m.byAgent[agent] = mr.Model
			}
		}
	}
}

// export writes the export of session id to out, or to stdout when out is "", a
// page of the session at a time (sessionPages): a session of 2,400 events took 58
// MB read whole, and one of 100,000 events, or of large inputs, more than a
// machine has. Its header counts the session's events and the configurations its
// tasks name (and comes before them): a first read of the session, page by page,
// counts its events and gathers the configurations' digests; a second writes the
// header, then the same events as it reads them, then the configurations'. The
// second read stops at the events the first counted: those a node serving the log
// appends meanwhile are not in this export, whose header counts what it holds.
func export(ctx context.Context, log eventlog.Log, id, out string, stdout, stderr io.Writer) int {
	if kind := streamKind(id); kind != "" {
		// import takes sessions only.
		fmt.Fprintf(stderr, "error: %s is a stream of the log (%s), no session: export exports sessions\n", node.QuoteHead(id), kind)
		return 1
	}
	pages := &sessionPages{log: log, id: id}
	var (
		n         int
		sessionID string
		startUS   int64    // the session's first event's time
		digests   []string // of the configurations the session's tasks name, sorted
		counted   = fnv.New64a()
	)
	err := pages.each(ctx, 0, func(page []messages.Envelope) error {
		if n == 0 {
			sessionID, startUS = page[0].SessionID, page[0].TS
		}
		n += len(page)
		digests = addDigests(digests, actors.NamedConfigs(page))
		fingerprint(counted, page)
		return nil
	})
	if err == nil && n == 0 {
		err = fmt.Errorf("no session %s", node.QuoteHead(id))
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	configs, err := actors.ConfigEvents(ctx, log, digests)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	// The memory changes the session made travel with it, so that an import
	// explains its memories as this log does.
	mem, err := sessionMemory(ctx, log, sessionID, startUS)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	write := func(w io.Writer) error {
		x, err := newExportWriter(w, sessionID, n, len(configs), len(mem))
		if err != nil {
			return err
		}
		written, wrote := 0, fnv.New64a()
		err = pages.each(ctx, n, func(page []messages.Envelope) error {
			written += len(page)
			fingerprint(wrote, page)
			return x.write(page)
		})
		if err != nil {
			return err
		}
		if written != n || wrote.Sum64() != counted.Sum64() {
			// Pruned, or an event of a stale owner's hidden since by one of its
			// successor's (eventlog.Superseded): the header counted other events.
			return fmt.Errorf("session %s changed while it was exported: export it again", id)
		}
		if err := x.write(configs); err != nil {
			return err
		}
		if err := x.write(mem); err != nil {
			return err
		}
		return x.flush()
	}
	if out == "" {
		err = write(stdout)
	} else {
		err = writeFileWhole(out, write)
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	if out != "" {
		fmt.Fprintf(stderr, "exported %d events of session %s to %s\n", n, id, out)
	}
	return 0
}

// fingerprint adds the seqs and IDs of page's events to h: the second read of an
// export compares what it wrote with what the first counted by it, with no
// payload decoded again. The same events in the same order give the same sum.
func fingerprint(h hash.Hash64, page []messages.Envelope) {
	var b [binary.MaxVarintLen64]byte
	for _, e := range page {
		h.Write(b[:binary.PutUvarint(b[:], e.Seq)])
		h.Write(b[:binary.PutUvarint(b[:], uint64(len(e.ID)))])
		h.Write([]byte(e.ID))
	}
}

// addDigests adds the sorted digests more to the sorted digests to, each once.
func addDigests(to, more []string) []string {
	if len(more) == 0 {
		return to
	}
	to = append(to, more...)
	slices.Sort(to)
	return slices.Compact(to)
}

// exportPageMax and exportPageBytes size the pages in which export reads a
// session (sessionPages): at most exportPageMax events, stopped by the log after
// the event that brings the page's payload to exportPageBytes (a task's input
// alone may be 1 MiB), as the node's GET of a session's events reads them.
const (
	exportPageMax   = 1000
	exportPageBytes = 1 << 20
)

// sessionPages reads a session's events a page at a time from a log that reads
// pages (eventlog.PageReader: SQLite's and ClickHouse's). Another log cannot read
// a page without reading the rest of the session: it is read whole, once, and
// each reading of its pages is of that one read.
type sessionPages struct {
	log   eventlog.Log
	id    string
	whole []messages.Envelope // of a log that reads no pages, once read
	read  bool
}

// each calls fn with the session's first n events (n ≤ 0: all of them, up to the
// first page shorter than asked for and not cut by its bytes: the session's end
// when it was read), page by page, in seq order; fn is never given an empty page.
func (p *sessionPages) each(ctx context.Context, n int, fn func(page []messages.Envelope) error) error {
	pr, paged := p.log.(eventlog.PageReader)
	if !paged {
		if !p.read {
			events, err := p.log.Read(ctx, p.id, 1)
			if err != nil {
				return err
			}
			p.whole, p.read = events, true
		}
		events := p.whole
		if n > 0 && len(events) > n {
			events = events[:n]
		}
		if len(events) == 0 {
			return nil
		}
		return fn(events)
	}
	from, read := uint64(1), 0
	for n <= 0 || read < n {
		size := exportPageMax
		if n > 0 {
			size = min(size, n-read)
		}
		page, err := pr.ReadN(ctx, p.id, from, size, exportPageBytes)
		if err != nil || len(page) == 0 {
			return err
		}
		if err := fn(page); err != nil {
			return err
		}
		read += len(page)
		from = page[len(page)-1].Seq + 1
		if n <= 0 && len(page) < size && messages.PayloadBytes(page) < exportPageBytes {
			// Short, and not cut by its bytes: the end of the session as it was
			// read. A node that appends meanwhile is not chased (it could append
			// a batch between any two reads, and the read would never end).
			return nil
		}
	}
	return nil
}

// importFile loads an export into the log: file, or stdin when file is "-". Nothing
// is written unless the whole file is valid and the session is new to this log.
// A session exported with tasks not ended is taken as unfinished says
// (unfinishedRefuse, unfinishedPark, unfinishedResume): by default it is refused,
// before the log is opened. The file is read as a stream, a line at a time
// (importPlan), and held whole only to be written in one append, when it is
// within the bound of one (oneAppend); stdin is spooled to a temporary file
// first, which the readings after the first read again.
func importFile(ctx context.Context, st store, file, unfinished string, stdin io.Reader, stdout, stderr io.Writer) int {
	src := func() (io.ReadCloser, error) { return os.Open(file) }
	if file == "-" {
		spool, err := spoolStdin(ctx, stdin)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		defer os.Remove(spool)
		src = func() (io.ReadCloser, error) { return os.Open(spool) }
	}
	plan, err := planImport(ctx, src, unfinished, time.Now().UnixMicro())
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			fmt.Fprintln(stderr, "error:", err)
		} else {
			fmt.Fprintf(stderr, "error: %s: %v\n", file, err)
		}
		return 1
	}
	id := plan.id
	log, err := st.open(ctx, importing)
	if err != nil {
		fmt.Fprintln(stderr, "error:", st.writeLocked(err))
		return 1
	}
	defer log.Close()
	if err := plan.write(ctx, log, src, oneAppend()); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	notEnded, parked := plan.notEnded, plan.parked
	switch {
	case len(parked) > 0:
		fmt.Fprintf(stdout, "imported session %s (%d events, and %d recorded here ending its unfinished tasks as cancelled: no node resumes it)\n", id, plan.events, len(parked))
	default:
		fmt.Fprintf(stdout, "imported session %s (%d events)\n", id, plan.events)
	}
	if plan.memoryRestored > 0 {
		fmt.Fprintf(stdout, "restored %d memory changes it made, for each memory's history\n", plan.memoryRestored)
	}
	for _, s := range plan.memorySkipped {
		fmt.Fprintf(stderr, "warning: the memory changes session %s made to namespace %s are not restored: %s\n", id, s.namespace, s.why)
	}
	if len(notEnded) > 0 && unfinished == unfinishedResume {
		fmt.Fprintf(stderr, "warning: session %s is imported unfinished (%s): a node serving this log resumes it, and performs again what it requested and has no answer of here\n",
			id, notEnded[0].describe())
	}
	return 0
}

// spoolStdin copies stdin to a temporary file, whose name it returns: an
// import reads its file more than once. It stops when ctx ends (Ctrl-C), also
// while stdin sends nothing (a producer that hangs, a terminal): the file is
// removed, and the copy, left blocked on stdin, ends with the command.
func spoolStdin(ctx context.Context, stdin io.Reader) (name string, err error) {
	f, err := os.CreateTemp("", "troupe-import-*.jsonl")
	if err != nil {
		return "", err
	}
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(f, ctxReader{ctx: ctx, r: stdin})
		copied <- err
	}()
	select {
	case err = <-copied:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("reading stdin: %w", err)
	}
	return f.Name(), nil
}

// ctxReader is r failing with ctx's error once ctx ended, checked before each
// read: a copy or a reading of a long file stops at Ctrl-C.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// importPlan is what an import writes, found in readings of its file before the
// log is opened: the session, its count of events, its configurations' events,
// its tasks not ended and the events that park them (unfinishedPark).
type importPlan struct {
	id       string
	events   int
	bytes    int // the events' payload
	configs  []messages.Envelope
	memory   []messages.Envelope // the memory changes the session made
	notEnded []unfinishedTask
	parked   []messages.Envelope
	// memoryRestored counts the memory changes write appended; memorySkipped
	// names the namespaces whose changes it left out (writeMemory).
	memoryRestored int
	memorySkipped  []skippedNamespace
}

// planImport reads the export src opens, a batch of events at a time, and
// validates all of it (scanExport) before anything is written: a first reading
// finds its tasks not ended, a second, when there are some, what the running one
// waits for and, to park them (unfinishedPark, stamped ts), the session's fold.
// An unfinished session is refused by default (unfinishedRefuse). The readings
// stop when ctx ends.
func planImport(ctx context.Context, src func() (io.ReadCloser, error), unfinished string, ts int64) (*importPlan, error) {
	read := func(batch func([]messages.Envelope) error) (exportHeader, exportTail, error) {
		f, err := src()
		if err != nil {
			return exportHeader{}, exportTail{}, err
		}
		defer f.Close()
		return scanExport(ctxReader{ctx: ctx, r: f}, batch)
	}
	var scan notEndedScan
	size := 0
	h, tail, err := read(func(batch []messages.Envelope) error {
		scan.add(batch)
		size += messages.PayloadBytes(batch)
		return nil
	})
	if err != nil {
		return nil, err
	}
	configs := tail.configs
	plan := &importPlan{id: h.SessionID, events: h.Events, bytes: size, configs: configs, memory: tail.memory, notEnded: scan.tasks()}
	if len(plan.notEnded) == 0 {
		return plan, nil
	}
	waits := newWaitsScan(plan.notEnded[0].id)
	var park *parker
	if unfinished == unfinishedPark {
		if park, err = newParker(plan.id, configs); err != nil {
			return nil, err
		}
	}
	_, _, err = read(func(batch []messages.Envelope) error {
		waits.add(batch)
		if park != nil {
			return park.add(batch)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	plan.notEnded[0].waits = waits.waits()
	if unfinished == unfinishedRefuse {
		return nil, unfinishedError(plan.id, plan.notEnded)
	}
	if park != nil {
		if plan.parked, err = park.park(plan.notEnded, ts); err != nil {
			return nil, err
		}
	}
	return plan, nil
}

// write writes the planned session into log, unless the log holds it already:
// the configurations its tasks name first (a session is never without them),
// then its events as src's export is read again, a batch at a time, and the
// events parking its tasks (the session is never in the log with them
// running), through a sessionWriter: in one append when the session is within
// bound, the configurations with it (a refused append writes none of them),
// else a batch at a time after them, its first event last. An append that fails
// part way leaves the session without its first event, which no node resumes,
// and which the same import completes.
func (plan *importPlan) write(ctx context.Context, log eventlog.Log, src func() (io.ReadCloser, error), bound appendBound) error {
	id := plan.id
	existing, err := eventlog.ReadPage(ctx, log, id, 1, 1)
	if err != nil {
		return err
	}
	// A session without its first event is one an import left part way: this
	// one completes it, appending again what it appended (a no-op), or is
	// refused (eventlog.ErrSeqConflict) when its events are not those.
	if len(existing) > 0 && existing[0].Seq == 1 {
		return fmt.Errorf("session %s already exists in this log; fork it instead, or import into another log", id)
	}
	// The session's memory changes are written with it: in its one append,
	// or else just before its first event, after its other events (an import
	// refused before leaves no memory change of a session the log does not
	// hold; one that fails after them is made again, which finds them there,
	// and planMemory appends none twice).
	memBatches, skipped, err := planMemory(ctx, log, plan.memory)
	if err != nil {
		return err
	}
	plan.memorySkipped = skipped
	mem := slices.Concat(memBatches...)
	w := &sessionWriter{log: log, whole: bound.fits(plan.events+len(plan.parked)+len(mem), plan.bytes+messages.PayloadBytes(plan.parked)+messages.PayloadBytes(mem))}
	if w.whole {
		// In the session's one append, before its events: all of it is
		// written or none, the configurations and the memory changes too
		// when the log refuses the session (an event ID taken). One the log
		// holds already is left as it is (the same ID at the same seq: a no-op).
		w.held = append(w.held, plan.configs...)
		w.held = append(w.held, mem...)
	} else {
		// One the log holds already is left as it is (the same event, or the
		// first of a digest's).
		for _, c := range plan.configs {
			if err := log.Append(ctx, []messages.Envelope{c}); err != nil && !errors.Is(err, eventlog.ErrSeqConflict) {
				return err
			}
		}
	}
	f, err := src()
	if err != nil {
		return err
	}
	defer f.Close()
	read := 0
	_, _, err = scanExport(ctxReader{ctx: ctx, r: f}, func(batch []messages.Envelope) error {
		if batch[0].SessionID != id || read+len(batch) > plan.events {
			return fmt.Errorf("the file changed while it was imported: import it again")
		}
		read += len(batch)
		return w.add(ctx, batch)
	})
	if err == nil && read != plan.events {
		err = fmt.Errorf("the file changed while it was imported: import it again")
	}
	if err == nil && !w.whole {
		for _, batch := range memBatches {
			if err = log.Append(ctx, batch); err != nil {
				err = fmt.Errorf("restoring the session's memory changes to %s: %w", batch[0].SessionID, err)
				break
			}
		}
	}
	if err == nil {
		err = w.finish(ctx, plan.parked)
	}
	if err == nil {
		plan.memoryRestored = len(mem)
	}
	if err != nil {
		if left := w.partial(); left != "" {
			if errors.Is(err, eventlog.ErrSeqConflict) {
				// The log refuses an event of the file (an ID another
				// session holds): it refuses it again.
				return fmt.Errorf("%w (%s; the log refuses an event of the file, so importing it again cannot complete session %s)", err, left, id)
			}
			return fmt.Errorf("%w (%s: import the file again to complete session %s)", err, left, id)
		}
	}
	return err
}

// fork copies a session up to a seq into a new session and continues it live.
func fork(ctx context.Context, st store, parentID string, at uint64, modelSpec, input, newID string, ac agentConfig, stdout, stderr io.Writer) int {
	if kind := streamKind(parentID); kind != "" {
		// No task ran there (verify says so too): its events would only begin a
		// session that is none of theirs.
		fmt.Fprintf(stderr, "error: %s is a stream of the log (%s), no session: there is no task to fork (no fork was made)\n", node.QuoteHead(parentID), kind)
		return 1
	}
	base, err := provider.Load("", nil)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	model, why, key, err := provider.FromSpec(ctx, modelSpec, base, nil)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	// The parent is looked for in the log opened read-only first: a data directory or
	// a ClickHouse database that holds no log (a misspelt --data), or no such
	// session, is an error before the fork's node creates or locks anything there.
	if err := st.hasSession(ctx, parentID); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	if newID == "" {
		newID = fmt.Sprintf("%s-fork-%d", parentID, time.Now().UnixMilli())
		if !node.ValidSessionID(newID) {
			fmt.Fprintf(stderr, "error: the fork's default ID %s is no valid session ID (one is %s): name the fork with --session NEW-ID\n", node.QuoteHead(newID), node.SessionIDRule)
			return 2
		}
	}
	if !node.ValidSessionID(newID) {
		fmt.Fprintf(stderr, "error: --session %s: a session ID is %s\n", node.QuoteHead(newID), node.SessionIDRule)
		return 2
	}
	// The node resumes the fork only: the other unfinished sessions of the log are
	// left to the node that serves it. Nor does it take a ClickHouse log from the
	// node serving it (which would refuse all work from then on): it writes its
	// new session beside it, as node run does (node.Config.ShareLog).
	cfg := node.Config{DataDir: st.data, Model: model, Secrets: append(base.Secrets(nil), key), Resume: func(id string) bool { return id == newID },
		ShareLog: true}
	// The agents' own models continue the fork as they ran the session (--model is
	// the default agent's).
	keys, err := ac.agents.ResolveModels(ctx, map[string]llm.Model{modelSpec: model}, base.TimeoutEnv(nil))
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	cfg.Secrets = append(cfg.Secrets, keys...)
	ac.apply(&cfg)
	// The fork searches its tools as the node would (tool_embedder), with the fork's model's provider.
	embedder, embedderKey, err := ac.file.NewToolEmbedder(ctx, modelSpec, base)
	if err != nil {
		fmt.Fprintln(stderr, "error: --config:", err)
		return 2
	}
	cfg.ToolEmbedder, cfg.Secrets = embedder, append(cfg.Secrets, embedderKey)
	// The memory and the knowledge bases of the file, as the node that ran the
	// session had them: the agent's memory and rag tools need them.
	closeStores, err := ac.stores(ctx, &cfg)
	if err != nil {
		fmt.Fprintln(stderr, "error: --config:", err)
		return 2
	}
	defer closeStores()
	if !ac.memoryWrites {
		// The same tools and schemas (so the same prompts), whose writes change
		// nothing; nothing written after a task, no consolidation.
		if cfg.MemoryTool != nil {
			mt := *cfg.MemoryTool
			mt.WritesRefused = forkWritesRefused
			cfg.MemoryTool = &mt
		}
		if cfg.KnowledgeTool != nil {
			kt := *cfg.KnowledgeTool
			kt.AddsRefused = forkWritesRefused
			cfg.KnowledgeTool = &kt
		}
		if cfg.Notes != nil {
			// The agent's notebook is the served node's too (notes/<agent>).
			nc := *cfg.Notes
			nc.WritesRefused = forkWritesRefused
			cfg.Notes = &nc
		}
		cfg.MemoryWriteAfterTask, cfg.Consolidation = false, nil
	}
	if st.clickhouse != "" {
		log, err := st.open(ctx, forking)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		defer log.Close()
		cfg.Log = log
	} else if err := st.checkDir(); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	n, err := node.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "error:", st.writeLocked(err))
		return 1
	}
	defer n.Close()
	made, err := makeFork(ctx, n.Log(), parentID, newID, at, time.Now().UnixMicro(), input, oneAppend())
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	state := made.state
	fmt.Fprintf(stdout, "session %s forked from %s at seq %d (model: %s — %s)\n", newID, parentID, at, model.Name(), why)
	// Watch before Run: Run resumes the fork at once and its first events must not be missed.
	// A feed that falls behind (a burst past a watcher's backlog) reads what it
	// missed from the log, after the fork's session.forked event: the events copied
	// into it are neither printed nor counted as its tasks' ends.
	live, stop, lost := n.WatchResuming(ctx, newID, false, made.last)
	defer stop()
	stopNode, err := n.Start(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer stopNode()
	// Run resumed the fork (its task is unfinished) or will on Submit: it is
	// followed until each of its unfinished tasks ended (the resumed one and those
	// submitted behind it, which run after it), then --input's.
	waitFor := made.unfinished
	if input != "" {
		waitFor++
	}
	if input != "" {
		if _, err := n.Submit(ctx, node.Task{Input: input, SessionID: newID, Depth: made.depth}); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
	}
	// Approvals the fork waits for, from the parent's events or as it goes on, are
	// asked on the terminal, as node run asks them; without one they are rejected,
	// saying why, since nobody else can answer.
	asker := node.NewAsker(n, "replay fork", newID, os.Stdin, cliflags.IsTerminal(os.Stdin), false, stdout)
	for _, p := range state.PendingApprovals() {
		if err := asker.Answer(ctx, &messages.ApprovalRequested{Key: p.Key, CallID: p.CallID, Tool: p.Tool, Arguments: p.Arguments}); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
	}
	code, err := asker.Follow(ctx, live, waitFor)
	if why := lost(); errors.Is(err, node.ErrLostFeed) && why != nil {
		err = fmt.Errorf("%w: %w", err, why)
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return code
	}
	fmt.Fprintf(stdout, "session %s\n", newID)
	return code
}

// forkMade is the fork makeFork wrote: its state at its session.forked event,
// and the number of its tasks not ended there.
type forkMade struct {
	state      *actors.SessionState
	unfinished int
	// depth is how deep a sub-agent the fork is (a fork of a child session
	// keeps the child's depth): --input's task is as deep.
	depth int
	// last is the seq of the fork's session.forked event, its last one written.
	last uint64
}

// makeFork writes into log the fork newID of session parentID at seq at, whose
// session.forked event is stamped ts, reading the parent a page at a time and
// never holding it whole: a first reading plans the copy (forkPlan); a second
// copies and folds it, to check that the fork can go on (the task it continues
// is under decision rules this build has, or input is a new task for it) before
// anything is written; a third copies it again and appends it through a
// sessionWriter: in one append, the session.forked event with it, when it is
// within bound (all of it lands, or none); else a page at a time, its first
// event last with the session.forked event. A fork that cannot go on is not
// written; an append that fails part way leaves the fork without its first
// event, which no node resumes, and which the error says.
func makeFork(ctx context.Context, log eventlog.Log, parentID, newID string, at uint64, ts int64, input string, bound appendBound) (forkMade, error) {
	if existing, err := eventlog.ReadPage(ctx, log, newID, 1, 1); err != nil || len(existing) > 0 {
		if err == nil {
			err = fmt.Errorf("session %s already exists", newID)
		}
		return forkMade{}, err
	}
	pages := &sessionPages{log: log, id: parentID}
	plan := newForkPlan(at)
	err := pages.each(ctx, 0, func(page []messages.Envelope) error { return plan.add(page) })
	if err == nil && plan.n == 0 {
		err = fmt.Errorf("no session %s", node.QuoteHead(parentID))
	}
	if err != nil {
		return forkMade{}, err
	}
	c, err := plan.copier(newID, ts)
	if err != nil {
		return forkMade{}, err
	}
	made := forkMade{state: actors.NewSessionState(newID)}
	// The tasks whose decision rules this build does not have, by their ID in the fork.
	unsupported := map[string]error{}
	fold := func(events []messages.Envelope) error {
		for i, e := range events {
			if err := made.state.Apply(e); err != nil {
				return err
			}
			switch e.Type {
			case messages.TypeTaskSubmitted:
				made.unfinished++
				if err := actors.CheckRules(events[i : i+1]); err != nil {
					unsupported[e.ID] = err
				}
			case messages.TypeTaskCompleted, messages.TypeTaskFailed:
				made.unfinished-- // unfinishedTasks's count
			}
		}
		return nil
	}
	err = pages.each(ctx, int(at), func(page []messages.Envelope) error {
		out, err := c.copy(page)
		if err != nil {
			return err
		}
		return fold(out)
	})
	if err != nil {
		return forkMade{}, err
	}
	link, err := c.link()
	if err == nil {
		err = fold([]messages.Envelope{link})
	}
	if err != nil {
		return forkMade{}, err
	}
	made.unfinished, made.depth = max(made.unfinished, 0), c.depth
	// The unfinished task continues under the decision rules it was recorded with
	// (a new task, --input, under this build's): a fork of a task whose rules this
	// build does not have is not made.
	if err := unsupported[made.state.Active()]; made.state.Active() != "" && err != nil {
		return forkMade{}, fmt.Errorf("cannot continue %s at seq %d: %v (no fork was made)", parentID, at, err)
	}
	if made.state.Active() == "" && input == "" {
		// A fork that would only sit there is not made.
		return forkMade{}, fmt.Errorf("nothing to continue at seq %d of %s: its task is finished there; pass --input to run a new task in the fork (no fork was made)", at, parentID)
	}
	c, err = plan.copier(newID, ts)
	if err != nil {
		return forkMade{}, err
	}
	w := &sessionWriter{log: log, whole: bound.fits(int(at)+1, plan.bytes+len(link.Payload))}
	copied := 0
	err = pages.each(ctx, int(at), func(page []messages.Envelope) error {
		out, err := c.copy(page)
		if err != nil {
			return err
		}
		copied += len(out)
		return w.add(ctx, out)
	})
	if err == nil && copied != int(at) {
		err = fmt.Errorf("session %s changed while it was forked", parentID)
	}
	if err == nil {
		err = w.finish(ctx, []messages.Envelope{link})
	}
	made.last = link.Seq
	if err != nil {
		if left := w.partial(); left != "" {
			return forkMade{}, fmt.Errorf("%w (the fork %s is left part way, %s: fork again under another ID)", err, newID, left)
		}
		return forkMade{}, err
	}
	return made, nil
}

// unfinishedTasks counts the tasks of events that did not end: task.submitted
// events less task.completed and task.failed ones (eventlog.SessionStatus's rule).
func unfinishedTasks(events []messages.Envelope) int {
	n := 0
	for _, e := range events {
		switch e.Type {
		case messages.TypeTaskSubmitted:
			n++
		case messages.TypeTaskCompleted, messages.TypeTaskFailed:
			n--
		}
	}
	return max(n, 0)
}

// writeFileWhole writes file with write, whole or not at all: into a temporary
// file beside it, renamed over it once written, synced and closed, so that a
// failure part way (a full disk) leaves neither a part nor a former file's loss
// behind. A file that is no regular file (/dev/stdout, a named pipe) is written
// in place.
func writeFileWhole(file string, write func(io.Writer) error) (err error) {
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(file); err == nil {
		if !fi.Mode().IsRegular() {
			f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				return err
			}
			if err := write(f); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}
		mode = fi.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return os.Rename(tmp.Name(), file)
}
