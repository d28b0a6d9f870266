package main

import (
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/notes"
)

// withNotes adds the notes tools cfg configures, on log, to the agent's tools: verify
// needs their schemas, which the recorded prompts hold; it calls no tool.
func withNotes(agentTools []tools.Tool, cfg *notes.Config, log eventlog.Log) ([]tools.Tool, error) {
	if cfg == nil {
		return agentTools, nil
	}
	c := *cfg
	c.Log = log
	n, err := notes.New(c)
	if err != nil {
		return nil, err
	}
	ts, err := n.Tools()
	if err != nil {
		return nil, err
	}
	return append(agentTools, ts...), nil
}
