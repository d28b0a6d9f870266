package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/notes"
)

// toolsOf returns the tools of the default agent of a node configured by the file at
// path: calculator, clock and the tool chains of its "chains" section (notesOf reads
// its notes; the rest of the file is not read). Nil when path is empty: the node's
// defaults.
func toolsOf(path string) ([]tools.Tool, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var file struct {
		Chains json.RawMessage `json:"chains"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	list := []tools.Tool{tools.Calculator{}, tools.NewClock(nil)}
	if len(file.Chains) == 0 {
		return list, nil
	}
	var chains []tools.Chain
	d := json.NewDecoder(bytes.NewReader(file.Chains))
	d.DisallowUnknownFields()
	if err := d.Decode(&chains); err != nil {
		return nil, fmt.Errorf("--config %s: chains: %w", path, err)
	}
	cts, err := tools.NewChainTools(chains, list)
	if err != nil {
		return nil, fmt.Errorf("--config %s: chains: %w", path, err)
	}
	for _, ct := range cts {
		list = append(list, ct)
	}
	return list, nil
}

func readSession(ctx context.Context, log eventlog.Log, id string) ([]messages.Envelope, error) {
	events, err := log.Read(ctx, id, 1)
	if err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, fmt.Errorf("no session %q", id)
	}
	return events, nil
}

// verifyResult is the JSON form of replay verify.
type verifyResult struct {
	SessionID     string             `json:"session_id"`
	Deterministic bool               `json:"deterministic"`
	Events        int                `json:"events"`
	Divergence    *actors.Divergence `json:"divergence,omitempty"`
}

// verify re-runs the default agent's decisions against the recorded session. No model
// is called and no tool runs: every result comes from the log.
func verify(ctx context.Context, log eventlog.Log, id string, agentTools []tools.Tool, asJSON bool, stdout, stderr io.Writer) int {
	events, err := readSession(ctx, log, id)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	agent, err := node.Config{Tools: agentTools}.Agent()
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	// The model is the runtime's choice, not the agent's code: take the recorded one.
	for _, e := range events {
		if e.Type == messages.TypeModelRequested {
			if p, err := e.Decode(); err == nil {
				agent.Model = p.(*messages.ModelRequested).Model
			}
			break
		}
	}
	div, err := actors.Verify(agent, events)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	res := verifyResult{SessionID: id, Deterministic: div == nil, Events: len(events), Divergence: div}
	if asJSON {
		if code := writeJSON(stdout, stderr, res); code != 0 {
			return code
		}
	} else if div == nil {
		fmt.Fprintf(stdout, "session %s: deterministic (%d events re-decided against their recorded results)\n", id, len(events))
	} else {
		fmt.Fprint(stdout, node.EscapeControls(fmt.Sprintf("session %s %s\n", id, div)))
	}
	if div != nil {
		return 1
	}
	return 0
}

func export(ctx context.Context, log eventlog.Log, id, out string, stdout, stderr io.Writer) int {
	events, err := readSession(ctx, log, id)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	w := stdout
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		defer f.Close()
		w = f
	}
	if err := writeExport(w, events); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	if out != "" {
		fmt.Fprintf(stderr, "exported %d events of session %s to %s\n", len(events), id, out)
	}
	return 0
}

// importFile loads an export into the log. Nothing is written unless the whole file is
// valid and the session is new to this log.
func importFile(ctx context.Context, st store, file string, stdout, stderr io.Writer) int {
	f, err := os.Open(file)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer f.Close()
	events, err := readExport(f)
	if err != nil {
		fmt.Fprintf(stderr, "error: %s: %v\n", file, err)
		return 1
	}
	log, err := st.open(ctx, false)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer log.Close()
	id := events[0].SessionID
	if existing, err := log.Read(ctx, id, 1); err != nil || len(existing) > 0 {
		if err == nil {
			err = fmt.Errorf("session %s already exists in this log; fork it instead, or import into another log", id)
		}
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	if err := log.Append(ctx, events); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	fmt.Fprintf(stdout, "imported session %s (%d events)\n", id, len(events))
	return 0
}

// fork copies a session up to a seq into a new session and continues it live.
func fork(ctx context.Context, st store, parentID string, at uint64, modelSpec, input, newID string, agentTools []tools.Tool, notesCfg *notes.Config, stdout, stderr io.Writer) int {
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
	if newID == "" {
		newID = fmt.Sprintf("%s-fork-%d", parentID, time.Now().UnixMilli())
	}
	if !node.ValidSessionID(newID) {
		fmt.Fprintf(stderr, "error: --session %q: a session ID is %s\n", newID, node.SessionIDRule)
		return 2
	}
	// The node resumes the fork only: the other unfinished sessions of the log are
	// left to the node that serves it.
	cfg := node.Config{DataDir: st.data, Model: model, Secrets: append(base.Secrets(nil), key), Tools: agentTools,
		Notes: notesCfg, Resume: func(id string) bool { return id == newID }}
	if st.clickhouse != "" {
		log, err := st.open(ctx, false)
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
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer n.Close()
	parent, err := readSession(ctx, n.Log(), parentID)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	if existing, err := n.Log().Read(ctx, newID, 1); err != nil || len(existing) > 0 {
		if err == nil {
			err = fmt.Errorf("session %s already exists", newID)
		}
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	events, err := forkEvents(parent, at, newID, time.Now().UnixMicro())
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	state := actors.NewSessionState(newID)
	for _, e := range events {
		if err := state.Apply(e); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
	}
	if state.Active() == "" && input == "" {
		// A fork that would only sit there is not made.
		fmt.Fprintf(stderr, "error: nothing to continue at seq %d of %s: its task is finished there; pass --input to run a new task in the fork (no fork was made)\n", at, parentID)
		return 1
	}
	if err := n.Log().Append(ctx, events); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	fmt.Fprintf(stdout, "session %s forked from %s at seq %d (model: %s — %s)\n", newID, parentID, at, model.Name(), why)
	// Watch before Run: Run resumes the fork at once and its first events must not be missed.
	live, stop := n.Watch(newID)
	defer stop()
	stopNode, err := n.Start(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer stopNode()
	// Run resumed the fork (its task is unfinished) or will on Submit.
	waitFor := 1
	if state.Active() != "" && input != "" {
		waitFor = 2 // the resumed task, then the new one
	}
	if input != "" {
		if _, err := n.Submit(ctx, node.Task{Input: input, SessionID: newID}); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
	}
	code, err := node.Follow(ctx, stdout, live, waitFor)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return code
	}
	fmt.Fprintf(stdout, "session %s\n", newID)
	return code
}
