package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/notes"
)

// notesOf returns the notes configuration of the node's configuration file at path
// (its "tools": {"notes": ...} section), or nil when the file enables no notes or
// path is empty. The caller fills in the log.
func notesOf(path string) (*notes.Config, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var file struct {
		Tools struct {
			Notes *notes.File `json:"notes"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	cfg := file.Tools.Notes.Config()
	if cfg != nil {
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("--config %s: tools.notes: %w", path, err)
		}
	}
	return cfg, nil
}

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
