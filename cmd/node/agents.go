package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/troupe-run/troupe/internal/cliflags"
	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
)

const agentsUsage = `usage:
  node agents list [--json] [--config FILE] [--agents FILE]

list checks the agents file (--agents, or "agents_file" in the configuration file)
as node run and serve do, and prints its agents: name, paradigm, model and
fallbacks, memory namespace, tools and description; then its teams: name, pattern,
members and description. A malformed file, an unknown field or paradigm, a bad
name, a tool, MCP server or skill the node does not have, a model it cannot reach
(a provider without its key), a memory namespace without the node's memory tool or
a team whose member is not an agent of the file exits 2 with the line and the
problem. The tools are expanded: mcp:SERVER to the server's tools now, skill:NAME to
the skill tools; an agent without "tools" has all the node's, MCP servers' included
("(all)"). --json prints each agent with its declared tools ("declared_tools") and
the expanded ones ("tools"; null: all). A tool whose calls wait for a human's
approval is marked "(approval)".
`

// agentsCmd runs "node agents ...": args are what follows "agents".
func agentsCmd(ctx context.Context, args []string, stdout, stderr io.Writer, opt options) int {
	if len(args) > 0 && helpArg(args[0]) {
		fmt.Fprint(stdout, agentsUsage)
		return 0
	}
	if len(args) == 0 || args[0] != "list" {
		fmt.Fprint(stderr, agentsUsage)
		return 2
	}
	fs := flag.NewFlagSet("node agents list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // flagsFailed prints it
	configPath := fs.String("config", "", "configuration file")
	agentsPath := fs.String("agents", "", "agents file (YAML)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := cliflags.Parse(fs, args[1:])
	if err != nil {
		return flagsFailed(err, stdout, stderr, agentsUsage)
	}
	if len(pos) != 0 {
		fmt.Fprint(stderr, agentsUsage)
		return 2
	}
	fc, err := loadConfig(configPath)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	// The flag, else TROUPE_AGENTS, else the configuration file's, as node run and
	// node serve take it.
	path := cmp.Or(*agentsPath, os.Getenv("TROUPE_AGENTS"), fc.AgentsFile)
	if path == "" {
		fmt.Fprintln(stderr, "error: no agents file: give --agents FILE, TROUPE_AGENTS or \"agents_file\" in the configuration file")
		return 2
	}
	file, err := nodeconfig.LoadAgents(path)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	// The node's tools, as node run builds them: the file's, the skills', the
	// chains', the notes' and the memory tool's.
	agent, logger, red, err := cliAgent(fc, opt, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	cfg := node.Config{Redactor: red}
	agent.Apply(&cfg)
	_, stopMCP, err := startMCP(ctx, fc.MCPServers, &cfg, logger)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	defer stopMCP()
	if err := file.CheckNodeTools(cfg); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	// The agents' models, as node run resolves them: a spec the node runs is its
	// model (TROUPE_MODEL, the file's "model").
	// The others take the node's per-request timeout (its "llm" section's, or
	// LLM_TIMEOUT), as node run gives them.
	known := map[string]llm.Model{}
	nodeSpec := cmp.Or(os.Getenv("TROUPE_MODEL"), fc.Model, "auto")
	base, err := provider.LoadSection(*configPath, fc.LLM, nil) // as read: the file may be a pipe
	if err == nil && slices.ContainsFunc(file.Agents, func(a nodeconfig.DeclaredAgent) bool {
		return a.Model == nodeSpec || slices.Contains(a.Fallbacks, nodeSpec)
	}) {
		known[nodeSpec], _, _, err = provider.FromSpec(ctx, nodeSpec, base, nil)
	}
	if err != nil {
		fmt.Fprintln(stderr, "error: the node's model:", err)
		return 2
	}
	if _, err := file.ResolveModels(ctx, known, base.TimeoutEnv(nil)); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	listed := make([]listedAgent, len(file.Agents))
	for i, a := range file.Agents {
		listed[i] = listedAgent{DeclaredAgent: a, DeclaredTools: a.Tools, Tools: expandTools(a.Tools, cfg)}
		if a.Tools == nil {
			listed[i].DeclaredTools = nil
		}
	}
	if *asJSON {
		var b []byte
		if len(file.Teams) == 0 {
			b, _ = json.MarshalIndent(listed, "", "  ")
		} else {
			b, _ = json.MarshalIndent(struct {
				Agents []listedAgent             `json:"agents"`
				Teams  []nodeconfig.DeclaredTeam `json:"teams"`
			}{listed, file.Teams}, "", "  ")
		}
		fmt.Fprintln(stdout, string(b))
		return 0
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tPARADIGM\tMODEL\tFALLBACKS\tMEMORY\tTOOLS\tDESCRIPTION")
	for _, a := range listed {
		toolList := "(all)"
		if a.Tools != nil {
			names := make([]string, len(a.Tools))
			for i, t := range a.Tools {
				names[i] = t
				if slices.Contains(a.Approvals, t) {
					names[i] += "(approval)"
				}
			}
			toolList = cmp.Or(strings.Join(names, ","), "(none)")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Name, a.Paradigm, cmp.Or(a.Model, "(node's)"),
			cmp.Or(strings.Join(a.Fallbacks, ","), "-"), cmp.Or(a.Memory, "(node's)"), toolList, node.EscapeControls(a.Description))
	}
	w.Flush()
	if len(file.Teams) > 0 {
		fmt.Fprintln(stdout)
		w = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "TEAM\tPATTERN\tMEMBERS\tDESCRIPTION")
		for _, t := range file.Teams {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", t.Name, t.Pattern, strings.Join(teamRoles(t), ","), node.EscapeControls(t.Description))
		}
		w.Flush()
	}
	return 0
}

// listedAgent is an agent as node agents list --json prints it: the file's fields,
// with its tools entries as declared and expanded.
type listedAgent struct {
	nodeconfig.DeclaredAgent
	// DeclaredTools are the file's entries (mcp:SERVER and skill:NAME among them).
	DeclaredTools []string `json:"declared_tools"`
	// Tools are the tools they give now; nil: every tool of the node.
	Tools []string `json:"tools"`
}

// expandTools returns the tools an agent's tools entries give on the node cfg
// configures: mcp:SERVER the server's tools now (its catalog's), skill:NAME the skill
// tools; sorted, each once. Nil entries (every tool) give nil.
func expandTools(entries []string, cfg node.Config) []string {
	if entries == nil {
		return nil
	}
	out := []string{}
	for _, e := range entries {
		if server, ok := strings.CutPrefix(e, nodeconfig.ToolsOfMCP); ok {
			if cfg.ToolCatalog != nil {
				for _, s := range cfg.ToolCatalog.Specs() {
					if strings.HasPrefix(s.Name, server+mcp.Separator) {
						out = append(out, s.Name)
					}
				}
			}
			continue
		}
		if _, ok := strings.CutPrefix(e, nodeconfig.ToolsOfSkill); ok {
			for _, t := range cfg.Skills.Tools() {
				out = append(out, t.Spec().Name)
			}
			continue
		}
		out = append(out, e)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// teamRoles lists a team's members, then the agents it names in another role
// ("judge=j", "aggregator=a", "critic=c").
func teamRoles(t nodeconfig.DeclaredTeam) []string {
	out := slices.Clone(t.Members)
	for _, r := range []struct{ role, name string }{{"aggregator", t.Aggregator}, {"judge", t.Judge}, {"fallback", t.Fallback}} {
		if r.name != "" {
			out = append(out, r.role+"="+r.name)
		}
	}
	if c, ok := strings.CutPrefix(t.Check, "critic: "); ok {
		out = append(out, "critic="+c)
	}
	return out
}
