package actors

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// A task runs under the configuration of its agent it was recorded with
// (messages.TaskSubmitted.ConfigDigest and Config, from decision rules 7): its
// system prompt (its skills' section included), its model and its approvals. A
// node restarted with another configuration goes on with a task in flight as it
// began, re-issuing its model call in flight as recorded (the same model, the
// same prompt, no tool configured since), and replay verifies a session whose configuration changed since;
// a task recorded after the change runs under the new one. The session records
// the configuration's content once per change, the digest with every task.

// configOf returns what of a's configuration a task records (its secrets not
// yet redacted: the session's redactor does that as it records the task).
func (a *Agent) configOf() messages.AgentConfig {
	c := messages.AgentConfig{SystemPrompt: a.SystemPrompt, Model: a.Model, Models: a.Models, ApprovalTimeoutUS: a.ApprovalTimeout.Microseconds()}
	for tool, on := range a.Approvals {
		if on {
			c.Approvals = append(c.Approvals, tool)
		}
	}
	slices.Sort(c.Approvals)
	for _, t := range a.Tools {
		c.Tools = append(c.Tools, t.Name)
	}
	return c
}

// configDigest returns the SHA-256 of c's JSON, hex-encoded.
func configDigest(c *messages.AgentConfig) string {
	b, err := json.Marshal(c)
	if err != nil { // strings and integers: it cannot fail
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// withConfig returns a running under the recorded configuration c: of a's tools,
// those c names (a tool c names that a no longer has cannot be offered). When c names
// another model than a's, and no chain of its own, its calls name that model
// (llm.Request.Models), so that the call performed is the one recorded: a node
// that does not have it answers the call with an error naming it.
func (a Agent) withConfig(c *messages.AgentConfig) Agent {
	live := a.Model
	a.SystemPrompt, a.Model, a.Models = c.SystemPrompt, c.Model, c.Models
	if len(a.Models) == 0 && c.Model != live && c.Model != "" {
		a.Models = []string{c.Model}
	}
	a.Approvals = nil
	for _, tool := range c.Approvals {
		if a.Approvals == nil {
			a.Approvals = make(map[string]bool, len(c.Approvals))
		}
		a.Approvals[tool] = true
	}
	a.ApprovalTimeout = time.Duration(c.ApprovalTimeoutUS) * time.Microsecond
	if slices.ContainsFunc(a.Tools, func(t messages.ToolSpec) bool { return !slices.Contains(c.Tools, t.Name) }) {
		// A tool configured since is not the task's: its offer, its calls.
		tools := make([]messages.ToolSpec, 0, len(c.Tools))
		for _, t := range a.Tools {
			if slices.Contains(c.Tools, t.Name) {
				tools = append(tools, t)
			}
		}
		a.Tools = tools
	}
	return a
}

// runs returns a as task t decides with it: under its rules, and under its
// recorded configuration when that is not a's.
func (t *taskState) runs(a Agent) Agent {
	a = a.underRules(t.rules)
	if t.config != nil {
		a = a.withConfig(t.config)
	}
	return a
}

// runAgent returns a as the running task decides with it (a itself when none
// runs).
func (s *SessionState) runAgent(a Agent) Agent {
	if s.active == nil {
		return a
	}
	return s.active.runs(a)
}

// ActiveTaskAgent returns the agent the running task decides with, among as: the
// one it names, under its rules and its recorded configuration (the default agent
// when no task runs, or when it names one as does not have).
func (s *SessionState) ActiveTaskAgent(as Agents) Agent {
	a, _ := as.For(s.ActiveAgent())
	return s.runAgent(a)
}

// knownConfig is a configuration the session recorded, and its digest.
type knownConfig struct {
	digest string
	config *messages.AgentConfig
}

// liveDigest returns the digest of the configuration of the agent named name
// among the state's agents now (WithAgents), "" for one it does not have.
func (s *SessionState) liveDigest(name string) string {
	if d, ok := s.digests[name]; ok {
		return d
	}
	d := ""
	if a, ok := s.agents.For(name); ok {
		c := a.configOf()
		d = configDigest(&c)
	}
	if s.digests == nil {
		s.digests = map[string]string{}
	}
	s.digests[name] = d
	return d
}

// foldConfig folds the configuration recorded with task p, run by t, and sets
// what t runs under: nil, the agent's own, when it is the one recorded.
func (s *SessionState) foldConfig(t *taskState, p *messages.TaskSubmitted) {
	if p.ConfigDigest == "" || t.rules < rulesConfig {
		return
	}
	c := p.Config
	i := slices.IndexFunc(s.configs, func(k knownConfig) bool { return k.digest == p.ConfigDigest })
	switch {
	case c != nil && i < 0:
		s.configs = append(s.configs, knownConfig{digest: p.ConfigDigest, config: c})
	case c == nil && i >= 0:
		c = s.configs[i].config
	}
	if c == nil || s.liveDigest(p.Agent) == p.ConfigDigest {
		return // the agent as configured now, secrets and all; or a log that lost the content
	}
	t.config = c
}

// forgetConfigs makes the session's unfinished tasks run under the agents of the
// node that decides them: a fork (messages.SessionForked) goes on with its own.
func (s *SessionState) forgetConfigs() {
	for _, t := range s.tasks {
		if t.phase != phaseDone {
			t.config = nil
		}
	}
}

// stampConfig records on task, a new task of the session, the configuration of
// the agent it names among as (ConfigDigest), with its content the first time
// the session records it (Config). A task naming an agent as does not have
// records none: it fails before any effect.
func (s *SessionState) stampConfig(task *messages.TaskSubmitted) {
	task.ConfigDigest, task.Config = "", nil
	a, ok := s.agents.For(task.Agent)
	if !ok {
		return
	}
	c := a.configOf()
	task.ConfigDigest = configDigest(&c)
	if !slices.ContainsFunc(s.configs, func(k knownConfig) bool { return k.digest == task.ConfigDigest }) {
		task.Config = &c
	}
}
