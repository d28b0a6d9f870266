package nodeconfig

import (
	"github.com/troupe-run/troupe/memory"

	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/troupe-run/troupe/a2a"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/redact"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
	"github.com/troupe-run/troupe/tools/notes"
	"github.com/troupe-run/troupe/tools/skills"
)

// AgentOptions are what replaces or adds to the file when its agent is built.
type AgentOptions struct {
	// SkillsDir and Disclosure, when not empty, replace the file's skills_dir and
	// disclosure (node's --skills and --disclosure, and their environment variables).
	SkillsDir, Disclosure string
	// ExtraTools join the built-in tools (a chain's steps may call them).
	ExtraTools []tools.Tool
	// Logger gets a warning for each skill folder that is skipped (nil: discarded).
	Logger *slog.Logger
	// Protect are the node's own files, which the files tool does not touch when
	// its root holds them (tools.FilesConfig.Protect): the data directory, the
	// configuration, agents, tokens and secret key files (Protected). The skills
	// directory is added to them.
	Protect []string
}

// mcpCommandFiles returns the files the command lines of the stdio MCP servers
// name: a command given by its path, and each argument that names a file
// (python3 server.py, node dist/index.js), read from the server's directory,
// and the package or module a Python server runs (python3 -m pkg.server).
// The node runs them, and runs them again when a server is reconnected: a
// model that could rewrite one would run code of its own writing.
func mcpCommandFiles(servers map[string]mcp.ServerConfig) []string {
	var out []string
	for _, s := range servers {
		if !s.Stdio() {
			continue
		}
		at := func(p string) string {
			if s.Dir != "" && !filepath.IsAbs(p) {
				return filepath.Join(s.Dir, p)
			}
			return p
		}
		if strings.ContainsRune(s.Command, filepath.Separator) || strings.ContainsRune(s.Command, '/') {
			out = append(out, at(s.Command))
		}
		for i, a := range s.Args {
			// python3 -m pkg.server runs the package's folder (or pkg.py), which
			// Python looks for in the server's directory first, whether or not it
			// is there yet: a package the model made there would run in place of
			// the installed one.
			// (-mpkg joined only for python itself: another program's -mode is no module).
			mod, ok := strings.CutPrefix(a, "-m")
			if ok && mod != "" && !strings.HasPrefix(filepath.Base(s.Command), "python") {
				ok = false
			}
			if ok {
				if mod == "" && i+1 < len(s.Args) {
					mod = s.Args[i+1]
				}
				if top, _, _ := strings.Cut(mod, "."); top != "" && !strings.ContainsAny(top, `/\`) && !strings.HasPrefix(top, "-") {
					out = append(out, at(top), at(top+".py"))
				}
				continue
			}
			if a == "" || strings.HasPrefix(a, "-") {
				continue
			}
			if st, err := os.Stat(at(a)); err == nil && st.Mode().IsRegular() {
				out = append(out, at(a))
			}
		}
	}
	return out
}

// Protected returns the paths of a node's own files for AgentOptions.Protect:
// its data directory and the files it reads its settings and secrets from (the
// configuration, agents, tokens, secret key and topic layout files), those of
// them not empty,
// and the working directory's .troupe.json (provider.DefaultConfigFile), which
// a node started there without --config loads: one the model wrote would
// configure it.
func Protected(dataDir string, files ...string) []string {
	var out []string
	for _, p := range append([]string{dataDir, provider.DefaultConfigFile}, files...) {
		if strings.TrimSpace(p) != "" {
			out = append(out, p)
		}
	}
	return out
}

// Protected is the package's Protected for a command that builds the node's
// agent without the node's flags (node tools, replay fork and verify): the
// tokens, secret key and topic layout files are those of TROUPE_AUTH_TOKENS_FILE,
// TROUPE_SECRET_KEY_FILE and TROUPE_KAFKA_TOPICS, or else of fc, as a node's are
// by default.
func (fc File) Protected(dataDir, configFile, agentsFile string) []string {
	return Protected(dataDir, configFile, agentsFile, cmp.Or(os.Getenv("TROUPE_AUTH_TOKENS_FILE"), fc.HTTPConfig().Auth.TokensFile),
		cmp.Or(os.Getenv("TROUPE_SECRET_KEY_FILE"), fc.SecretKeyFile), cmp.Or(os.Getenv("TROUPE_KAFKA_TOPICS"), fc.TopicsFile))
}

// Agent is the node's default agent as the file configures it, in the terms of
// node.Config (Apply): what node run, serve and mcp run, and what replay verify and
// fork re-decide recorded sessions with. The MCP servers' tools are not in it: they
// come from a connection to the servers (ConnectMCP), as the node's ToolCatalog.
type Agent struct {
	// Tools are calculator and clock, the built-ins of the "tools" section and the
	// extra tools. The notes tool is not among them (see Notes), nor the chains.
	Tools []tools.Tool
	// Skills are the skills of skills_dir (nil: none).
	Skills *skills.Set
	// Disclosure is how the tools reach the model.
	Disclosure disclosure.Strategy
	// Notes configures the notes tool (nil: none); the node builds it on its log.
	Notes *notes.Config
	// MemoryTool configures the memory tool (nil: none); the node builds it on its
	// memories (the "memory" section's "tool").
	MemoryTool *memory.ToolConfig
	// KnowledgeTool configures the rag tool (nil: none); the node builds it on its
	// knowledge bases (the "knowledge" section's "tool").
	KnowledgeTool *node.KnowledgeToolConfig
	// Chains are the file's tool chains, which the node builds (node.Config.Chains):
	// their steps call the tools, the skills', the notes' and the MCP servers'.
	Chains []tools.Chain
	// SystemPrompt and MaxSteps are the file's (empty and zero: the node's defaults).
	SystemPrompt string
	MaxSteps     int
	// MaxTokens, LoopRepeats and LoopStaleSteps are the file's stop conditions, as
	// node.Config takes them.
	MaxTokens, LoopRepeats, LoopStaleSteps int
	// MaxCostUSD is the file's max_cost_usd (node.Config.MaxCostUSD).
	MaxCostUSD float64
	// Context is the file's context section (node.Config.Context).
	Context actors.ContextOptions
	// ApprovalTimeout is the file's approval_timeout (node.Config.ApprovalTimeout).
	ApprovalTimeout time.Duration
}

// Agent builds the file's default agent. It reads the skills directory and checks the
// files tool's root, so it fails on what Validate cannot see: a missing directory. A
// chain step naming no tool is node.Config.Validate's to find, once the MCP servers'
// catalog is known.
func (fc File) Agent(opt AgentOptions) (Agent, error) {
	logger := opt.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	strategy, err := disclosure.ParseStrategy(cmp.Or(opt.Disclosure, fc.Disclosure))
	if err != nil {
		return Agent{}, err
	}
	set, err := LoadSkills(cmp.Or(opt.SkillsDir, fc.SkillsDir), fc.Skills, logger)
	if err != nil {
		return Agent{}, err
	}
	// The skills' folders are the operator's: a model that could write into them
	// would change the instructions of later tasks, and, with scripts allowed,
	// run a script of its own writing (run_skill_script).
	protect := slices.Clone(opt.Protect)
	if dir := cmp.Or(opt.SkillsDir, fc.SkillsDir); dir != "" {
		protect = append(protect, dir)
	}
	protect = append(protect, mcpCommandFiles(fc.MCPServers)...)
	list, err := fc.Tools.Build(opt.ExtraTools, protect)
	if err != nil {
		return Agent{}, err
	}
	remote, err := A2ATools(fc.A2AAgents)
	if err != nil {
		return Agent{}, err
	}
	list = append(list, remote...)
	approvalTimeout, err := ParseApprovalTimeout(fc.ApprovalTimeout)
	if err != nil {
		return Agent{}, fmt.Errorf("approval_timeout: %w", err)
	}
	a := Agent{Tools: list, Skills: set, Disclosure: strategy, Notes: fc.Tools.NotesConfig(), MemoryTool: fc.Memory.ToolConfig(), KnowledgeTool: fc.Knowledge.ToolConfig(), Chains: fc.Chains,
		SystemPrompt: fc.SystemPrompt, MaxSteps: fc.MaxSteps,
		MaxTokens: fc.MaxTokens, LoopRepeats: loopSetting(fc.LoopRepeats), LoopStaleSteps: loopSetting(fc.LoopStaleSteps), MaxCostUSD: fc.MaxCostUSD,
		Context: fc.Context.Options(), ApprovalTimeout: approvalTimeout}
	// A stable prefix that leaves no room in the window for a task is refused
	// here, with the file's other errors, as the node would refuse it at its
	// start: counted by the node's own check (node.Config.CheckPromptFits), over
	// the system prompt with the skills' section and the schemas of the tools the
	// file gives the agent (the built-ins, the skills', notes', memory, rag, A2A
	// tools and chains), all but the MCP servers', which connect later.
	var cfg node.Config
	a.Apply(&cfg)
	if err := cfg.CheckPromptFits(); err != nil {
		if fit := (*actors.PromptFitError)(nil); errors.As(err, &fit) {
			return Agent{}, fmt.Errorf("system_prompt: the default agent: %w", fit)
		}
		return Agent{}, err
	}
	return a, nil
}

// A2ATools returns the tools a2a__<name> of the remote A2A agents of the file's
// "a2a_agents" (name → agent card URL), sorted by name; their cards are fetched at
// their first call. A call cancelled by its session (its task cancelled, or past its
// deadline) cancels the remote task, as a delegate call cancels its child's.
func A2ATools(agents map[string]string) ([]tools.Tool, error) {
	names := slices.Sorted(maps.Keys(agents))
	out := make([]tools.Tool, 0, len(names))
	for _, name := range names {
		t, err := a2a.NewTool(a2a.ToolConfig{Name: name, CardURL: agents[name], CancelRemote: CancelsRemoteTask})
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// A2ASecrets returns the credentials of the card URLs of the file's "a2a_agents"
// (a password, ?api_key=...: redact.URLSecrets), which a remote agent's error may
// echo.
func A2ASecrets(agents map[string]string) []string {
	var out []string
	for _, u := range agents {
		out = append(out, redact.URLSecrets(u)...)
	}
	return out
}

// CancelsRemoteTask says whether a call that ended with cause (context.Cause of its
// context) cancels the remote work it started: when its session cancelled it (the
// task was cancelled or ran past its deadline), not when the node stops (the call's
// next performer asks for the same work again).
func CancelsRemoteTask(cause error) bool { return errors.Is(cause, actors.ErrEffectCancelled) }

// Apply sets the agent's fields of cfg.
func (a Agent) Apply(cfg *node.Config) {
	cfg.Tools, cfg.Skills, cfg.Disclosure, cfg.Notes, cfg.Chains = a.Tools, a.Skills, a.Disclosure, a.Notes, a.Chains
	cfg.MemoryTool, cfg.KnowledgeTool = a.MemoryTool, a.KnowledgeTool
	cfg.SystemPrompt, cfg.MaxSteps = a.SystemPrompt, a.MaxSteps
	cfg.MaxTokens, cfg.LoopRepeats, cfg.LoopStaleSteps = a.MaxTokens, a.LoopRepeats, a.LoopStaleSteps
	cfg.MaxCostUSD = a.MaxCostUSD
	cfg.ApprovalTimeout = a.ApprovalTimeout
	cfg.Context = a.Context
}

// ConnectMCP connects to the MCP servers of the file's "mcp_servers" section and
// waits up to wait for each one's first attempt; a server that has not connected by
// then joins the client's catalog when it does (Client.Status says which). With no
// servers it returns a nil client. stop closes the connections. red (that of
// logger's redact.Handler, and of the node's events) learns the servers' OAuth
// tokens as they are obtained (mcp.ClientConfig.Redactor).
func ConnectMCP(ctx context.Context, servers map[string]mcp.ServerConfig, wait time.Duration, logger *slog.Logger, red *redact.Redactor) (client *mcp.Client, stop func(), err error) {
	if len(servers) == 0 {
		return nil, func() {}, nil
	}
	client, err = mcp.NewClient(mcp.ClientConfig{Servers: servers, Logger: logger, Redactor: red})
	if err != nil {
		return nil, nil, fmt.Errorf("mcp_servers: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = client.Run(runCtx)
	}()
	stop = func() {
		cancel()
		<-done
	}
	wctx, wcancel := context.WithTimeout(ctx, wait)
	_ = client.WaitReady(wctx)
	wcancel()
	return client, stop, nil
}

// The values of tool_embedder.
const (
	ToolEmbedderHashing = "hashing"
	ToolEmbedderLLM     = "llm"
)

// NewToolEmbedder returns the embedder of tool_embedder for a node whose model is
// modelSpec on the provider configuration base (llm/provider), or nil without one
// (search_tools then ranks with BM25). llm is the embeddings endpoint of the provider
// the model resolves to, with its embedding model (provider.EmbedderFromSpec): the
// offline embedder for the offline and scripted models. It also returns the API key,
// for redaction. Replay verify needs none: search_tools' results are in the log.
func (fc File) NewToolEmbedder(ctx context.Context, modelSpec string, base provider.Config) (llm.Embedder, string, error) {
	switch fc.ToolEmbedder {
	case "":
		return nil, "", nil
	case ToolEmbedderHashing:
		return llm.HashingEmbedder{}, "", nil
	}
	e, key, err := provider.EmbedderFromSpec(ctx, modelSpec, base, nil)
	if err != nil {
		return nil, "", fmt.Errorf("tool_embedder %q: %w", fc.ToolEmbedder, err)
	}
	return e, key, nil
}
