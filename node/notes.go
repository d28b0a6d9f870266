package node

import (
	"slices"
	"strings"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/notes"
)

// addNotes adds the notes tool to the agent's tools when Config.Notes asks for it:
// on the node's log unless the configuration names another, for the default agent,
// with its text redacted and its events stamped by the node's clock. The caller has
// opened the log and set the defaults.
func (n *Node) addNotes() error {
	if n.cfg.Notes == nil {
		return nil
	}
	cfg := *n.cfg.Notes
	if cfg.Log == nil {
		cfg.Log = n.routedLogOf(n.log)
	}
	if cfg.Agent == "" {
		cfg.Agent = "default" // the node's one agent (Config.agent)
	}
	if cfg.Redact == nil {
		cfg.Redact = n.redactor.String
	}
	if cfg.Now == nil {
		cfg.Now = n.cfg.Clock.Now
	}
	ns, err := notes.New(cfg)
	if err != nil {
		return err
	}
	box, err := ns.Toolbox()
	if err != nil {
		return err
	}
	ts, ops := []tools.Tool{box}, []string{""}
	if cfg.Expand {
		ts, ops = box.Expand(), box.Ops()
	}
	n.notesTools = map[string]tools.Tool{}
	for i, t := range ts {
		n.notesTools[t.Spec().Name] = t
		if n.sharded() {
			// The stream's changes run on its owner (notesroute.go).
			ts[i] = &routedNotesTool{Tool: t, n: n, op: ops[i], agent: cfg.Agent}
		}
	}
	n.cfg.Tools = append(slices.Clone(n.cfg.Tools), ts...)
	return nil
}

// MCPSessionStatus is the status a session listing gives the stream of an MCP
// client's session with the node (eventlog.MCPSessionStreamPrefix).
const MCPSessionStatus = "mcp-session"

// ConfigStatus is the status a session listing gives the stream of an agent's
// configuration that tasks ran under (eventlog.ConfigStreamPrefix).
const ConfigStatus = "config"

// MarkStreams gives the notes streams among sessions the status notes.Status, and
// the memory namespaces' streams memory.Status, the knowledge bases'
// knowledge.Status, the A2A tasks' push configs' a2a.PushStatus, the dashboard's
// sign-ins SignInStatus, the stored effect commands BusStatus, the MCP clients'
// sessions MCPSessionStatus, the agents' configurations ConfigStatus: they are streams of the log but no sessions, and no
// task runs there.
func MarkStreams(infos []eventlog.SessionInfo) {
	for i := range infos {
		switch {
		case notes.IsStream(infos[i].ID):
			infos[i].Status = notes.Status
		case memory.IsStream(infos[i].ID):
			infos[i].Status = memory.Status
		case knowledge.IsStream(infos[i].ID):
			infos[i].Status = knowledge.Status
		case a2a.IsPushStream(infos[i].ID):
			infos[i].Status = a2a.PushStatus
		case IsSignInStream(infos[i].ID):
			infos[i].Status = SignInStatus
		case IsBusStream(infos[i].ID):
			infos[i].Status = BusStatus
		case strings.HasPrefix(infos[i].ID, eventlog.MCPSessionStreamPrefix):
			infos[i].Status = MCPSessionStatus
		case strings.HasPrefix(infos[i].ID, eventlog.ConfigStreamPrefix):
			infos[i].Status = ConfigStatus
		}
	}
}
