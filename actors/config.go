package actors

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
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
	if strings.Contains(c.SystemPrompt, redact.Redacted) {
		// Its prompt held secrets, redacted as it was recorded: the task runs with
		// them put back, or not at all (decideAmong), never with "[REDACTED]" sent
		// to its model in their place.
		restored, ok := s.restoreSecrets(c, p.ConfigDigest)
		c, t.secretsLost = restored, !ok
	}
	t.config = c
}

// The most fillings of a recorded prompt's redacted places restoreSecrets tries, and
// the most candidates it takes for one place.
const (
	maxSecretFillings  = 4096
	maxSecretsForPlace = 16
)

// restoreSecrets returns c, a recorded configuration whose system prompt was
// redacted, with the secrets put back in its place: each place filled with what
// stands between the same words in the system prompt of one of the state's agents
// now (a prompt edited since keeps its secret among the same words, most often),
// the filling taken only when the configuration it makes has c's recorded digest,
// which was of the configuration as it was, secrets included. It returns false
// when no filling has that digest: the secret is in none of the agents' prompts
// now, or the words around it changed.
func (s *SessionState) restoreSecrets(c *messages.AgentConfig, digest string) (*messages.AgentConfig, bool) {
	pieces := strings.Split(c.SystemPrompt, redact.Redacted)
	var prompts []string
	for _, a := range s.agentList() {
		if strings.TrimSpace(a.SystemPrompt) != "" && !slices.Contains(prompts, a.SystemPrompt) {
			prompts = append(prompts, a.SystemPrompt)
		}
	}
	places := make([][]string, len(pieces)-1)
	total := 1
	for i := range places {
		places[i] = secretCandidates(prompts, pieces[i], pieces[i+1], i == 0, i == len(places)-1)
		if total *= len(places[i]); total == 0 || total > maxSecretFillings {
			return c, false
		}
	}
	filled := *c
	pick := make([]int, len(places))
	var b strings.Builder
	for {
		b.Reset()
		for i, piece := range pieces {
			b.WriteString(piece)
			if i < len(places) {
				b.WriteString(places[i][pick[i]])
			}
		}
		filled.SystemPrompt = b.String()
		if configDigest(&filled) == digest {
			return &filled, true
		}
		i := 0
		for ; i < len(pick); i++ { // the next filling
			if pick[i]++; pick[i] < len(places[i]) {
				break
			}
			pick[i] = 0
		}
		if i == len(pick) {
			return c, false
		}
	}
}

// secretCandidates returns what may have stood in a redacted place of a recorded
// prompt, between the texts before and after it: in each of prompts, what follows
// an occurrence of before's last words (its last 32, 8 or 2 bytes: the prompt may
// have been edited around it), up to the next occurrence of after's first ones, or
// to the end of its word; "[REDACTED]" itself (a prompt may say it). The longer the
// words matched, the earlier a candidate comes.
// first and last say that the place opens or ends the prompt.
func secretCandidates(prompts []string, before, after string, first, last bool) []string {
	out := []string{redact.Redacted}
	add := func(c string) {
		if c != "" && len(out) < maxSecretsForPlace && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	for _, n := range []int{32, 8, 2} { // the words around it, edited or not
		tail, head := before[max(0, len(before)-n):], after[:min(len(after), n)]
		for _, p := range prompts {
			var starts []int
			switch {
			case tail == "" && first:
				starts = []int{0}
			case tail != "":
				for from := 0; len(starts) < maxSecretsForPlace; {
					i := strings.Index(p[from:], tail)
					if i < 0 {
						break
					}
					starts = append(starts, from+i+len(tail))
					from += i + 1
				}
			} // two places in a row: the second has no words before it to find
			for _, start := range starts {
				rest := p[start:]
				if head == "" && last {
					add(rest)
				} else if j := strings.Index(rest, head); head != "" && j > 0 {
					add(rest[:j])
				}
				word := rest
				if j := strings.IndexFunc(rest, unicode.IsSpace); j >= 0 {
					word = rest[:j]
				}
				add(word)
				add(strings.TrimRightFunc(word, unicode.IsPunct))
			}
		}
	}
	return out
}

// agentList returns the state's agents: the default one and the named ones, by name.
func (s *SessionState) agentList() []Agent {
	if s.agents == nil {
		return nil
	}
	out := []Agent{s.agents.Default}
	names := make([]string, 0, len(s.agents.Named))
	for name := range s.agents.Named {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		out = append(out, s.agents.Named[name])
	}
	return out
}

// forgetConfigs makes the session's unfinished tasks run under the agents of the
// node that decides them: a fork (messages.SessionForked) goes on with its own.
func (s *SessionState) forgetConfigs() {
	for _, t := range s.tasks {
		if t.phase != phaseDone {
			t.config, t.secretsLost = nil, false
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
