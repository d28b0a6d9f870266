package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/troupe-run/troupe/internal/cliflags"
	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/node"
)

const agentsUsage = `usage:
  node agents list [--json] [--config FILE] [--agents FILE]

list checks the agents file (--agents, or "agents_file" in the configuration file)
and prints its agents: name, paradigm, model, tools and description; then its
teams: name, pattern, members and description. A malformed file, an unknown field
or paradigm, a bad name, a tool the node does not have, or a team whose member is
not an agent of the file exits 2 with the line and the problem. The tools are the node's (node tools list)
but an MCP server's; an agent without "tools" has them all, MCP servers' included.
Every agent runs the node's model: an agent's own "model" and "memory" are refused
as not supported yet.
`

// agentsCmd runs "node agents ...": args are what follows "agents".
func agentsCmd(ctx context.Context, args []string, stdout, stderr io.Writer, opt options) int {
	if len(args) == 0 || args[0] != "list" {
		fmt.Fprint(stderr, agentsUsage)
		return 2
	}
	fs := flag.NewFlagSet("node agents list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, agentsUsage) }
	configPath := fs.String("config", "", "configuration file")
	agentsPath := fs.String("agents", "", "agents file (YAML)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := cliflags.Parse(fs, args[1:])
	if err != nil {
		return 2
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
	path := cmp.Or(*agentsPath, fc.AgentsFile)
	if path == "" {
		fmt.Fprintln(stderr, "error: no agents file: give --agents FILE or \"agents_file\" in the configuration file")
		return 2
	}
	file, err := nodeconfig.LoadAgents(path)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	// The node's tools, as node run builds them: the file's, the skills', the
	// chains', the notes' and the memory tool's.
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	agent, err := fc.Agent(nodeconfig.AgentOptions{ExtraTools: opt.extraTools, Logger: logger})
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	var cfg node.Config
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
	if *asJSON {
		var b []byte
		if len(file.Teams) == 0 {
			b, _ = json.MarshalIndent(file.Agents, "", "  ")
		} else {
			b, _ = json.MarshalIndent(struct {
				Agents []nodeconfig.DeclaredAgent `json:"agents"`
				Teams  []nodeconfig.DeclaredTeam  `json:"teams"`
			}{file.Agents, file.Teams}, "", "  ")
		}
		fmt.Fprintln(stdout, string(b))
		return 0
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tPARADIGM\tMODEL\tTOOLS\tDESCRIPTION")
	// Every agent runs the node's model (an agent's own model is not supported yet).
	for _, a := range file.Agents {
		toolList := "(all)"
		if a.Tools != nil {
			toolList = cmp.Or(strings.Join(a.Tools, ","), "(none)")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", a.Name, a.Paradigm, "(node's)", toolList, a.Description)
	}
	w.Flush()
	if len(file.Teams) > 0 {
		fmt.Fprintln(stdout)
		w = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "TEAM\tPATTERN\tMEMBERS\tDESCRIPTION")
		for _, t := range file.Teams {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", t.Name, t.Pattern, strings.Join(teamRoles(t), ","), t.Description)
		}
		w.Flush()
	}
	return 0
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
