package actors

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
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
// the digest with every task, and the configuration's content once per log, in a
// stream of its own (messages.ConfigStream: storeConfig, before the task), which
// whoever folds the session reads first (LoadConfigs, WithConfigs): the fold stays
// a function of what it is handed. The first builds of rules 7 recorded the content
// with the first task of each session that named it (TaskSubmitted.Config), which
// is read as it was.

// configOf returns what of a's configuration a task recorded under decision rules
// rules records (its secrets not yet redacted: the session's redactor does that
// as it records the task): from rulesRoster, its roster too (roster.go).
func (a *Agent) configOf(rules int) messages.AgentConfig {
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
	if rules >= rulesRoster {
		a.rosterOf(&c)
	}
	return c
}

// ConfigDigest returns the SHA-256 of c's JSON, hex-encoded: the digest a task
// records (messages.TaskSubmitted.ConfigDigest) and its configuration's stream is
// named by (messages.ConfigStream).
func ConfigDigest(c *messages.AgentConfig) string {
	b, err := json.Marshal(c)
	if err != nil { // strings and integers: it cannot fail
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ConfigOfDigest reports whether c may be the configuration a log holds under
// digest (messages.ConfigRecorded): c hashes to digest, or one of its texts that
// can hold a secret holds redact.Redacted, its secrets redacted as it was recorded
// (it then hashes to another digest than the one of the configuration as it was).
// Those texts are its system prompt, its critic's prompt and the descriptions of
// its roster and members: a session's actor redacts the whole event it records
// the configuration in (SessionActor's storeConfig), so a secret in any of them
// is recorded as the marker. A task runs under one with the marker in its system
// prompt only with its secrets put back into a configuration that hashes to
// digest (restoreSecrets), never as it is. A configuration with the marker in no
// such text (its model, a tool's name, a field no configuration has) must hash to
// digest.
func ConfigOfDigest(c *messages.AgentConfig, digest string) bool {
	return redactedText(c) || ConfigDigest(c) == digest
}

// redactedText reports whether one of c's texts that can hold a secret (its
// prompts, the descriptions of its roster and members) held secrets, redacted as
// c was recorded.
func redactedText(c *messages.AgentConfig) bool {
	if redactedPrompt(c) || strings.Contains(c.CriticPrompt, redact.Redacted) {
		return true
	}
	described := func(a messages.RosterAgent) bool { return strings.Contains(a.Description, redact.Redacted) }
	return slices.ContainsFunc(c.Roster, described) || slices.ContainsFunc(c.Members, described)
}

// redactedPrompt reports whether c's system prompt held secrets, redacted as c
// was recorded.
func redactedPrompt(c *messages.AgentConfig) bool {
	return strings.Contains(c.SystemPrompt, redact.Redacted)
}

// withConfig returns a running under the recorded configuration c: of a's tools,
// those c names (a tool c names that a no longer has cannot be offered). When c names
// another model than a's, and no chain of its own, its calls name that model
// (llm.Request.Models), so that the call performed is the one recorded; a node
// with no route to it (its model was changed, not added beside) performs the call
// with its own model, as a fallback would, and the answer names the model that
// gave it (SessionDeps.Routable): the task goes on, decided as recorded.
func (a Agent) withConfig(c *messages.AgentConfig) Agent {
	live := a.Model
	a.SystemPrompt, a.Model, a.Models = c.SystemPrompt, c.Model, c.Models
	if len(a.Models) == 0 && c.Model != live && c.Model != "" {
		a.Models, a.recordedModel = []string{c.Model}, true
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
		a = t.rostered(a.withConfig(t.config))
	}
	return a
}

// changes reports whether runs changes an agent: a task under older rules or a
// recorded configuration. Most run under today's rules and the node's own, and
// their callers skip runs and the two copies of the agent it makes.
func (t *taskState) changes() bool { return t.rules < ContextRules || t.config != nil }

// rostered returns a with its roster rendered from t's recorded configuration,
// when t runs under one recorded under rulesRoster or later (roster.go).
func (t *taskState) rostered(a Agent) Agent {
	if t.config == nil || t.rules < rulesRoster {
		return a
	}
	if t.config.Roster != nil && t.delegate == nil {
		if s, err := delegateSpec(t.config.Roster); err == nil { // names and texts: it cannot fail
			t.delegate = &s
		}
	}
	return a.withRoster(t.config, t.delegate)
}

// runAgent returns a as the running task decides with it (a itself when none
// runs).
func (s *SessionState) runAgent(a Agent) Agent {
	if s.active == nil || !s.active.changes() {
		return a
	}
	return s.active.runs(a)
}

// ActiveTaskAgent returns the agent the running task decides with, among as: the
// one it names, under its rules and its recorded configuration (the default agent
// when no task runs, or when it names one as does not have).
func (s *SessionState) ActiveTaskAgent(as Agents) Agent {
	return s.activeTaskAgent(&as.Default, as.Named)
}

// activeTaskAgent is ActiveTaskAgent among the agents def (the default one) and
// named, the default one by pointer: the agent is copied once when the task runs
// it as it is (SessionActor.agent, at each step).
func (s *SessionState) activeTaskAgent(def *Agent, named map[string]Agent) Agent {
	name := s.ActiveAgent()
	var a Agent
	if defaultAgent(name) {
		a = *def
	} else {
		a = named[name] // as Agents.For: the zero agent when named has none of that name
	}
	if t := s.active; t != nil && t.changes() {
		a = t.runs(a)
	}
	return a
}

// knownConfig is a configuration the session recorded, and its digest.
type knownConfig struct {
	digest string
	config *messages.AgentConfig
}

// liveDigest returns the digest of the configuration of the agent named name
// among the state's agents now (WithAgents), as a task under rules records it,
// "" for one it does not have.
func (s *SessionState) liveDigest(name string, rules int) string {
	recorded := s.agents.recordRules()
	if (rules >= rulesRoster) != (recorded >= rulesRoster) {
		// A task of rules that record another form than new tasks do (with or
		// without the roster): computed apart, memoized under another key.
		return s.memoDigest("\x00"+name, name, rules)
	}
	if d, ok := s.digests[name]; ok {
		return d
	}
	if s.agents.digests != nil {
		if defaultAgent(name) {
			name = ""
		}
		return s.agents.digests[name] // "" for one it does not have
	}
	return s.memoDigest(name, name, recorded)
}

// memoDigest returns the digest of agent name's configuration as a task under
// rules records it ("" for an agent the state does not have), memoized in
// s.digests under key.
func (s *SessionState) memoDigest(key, name string, rules int) string {
	if d, ok := s.digests[key]; ok {
		return d
	}
	d := ""
	if a, ok := s.agents.For(name); ok {
		c := a.configOf(rules)
		d = ConfigDigest(&c)
	}
	if s.digests == nil {
		s.digests = map[string]string{}
	}
	s.digests[key] = d
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
	if c == nil || s.liveDigest(p.Agent, t.rules) == p.ConfigDigest {
		return // the agent as configured now, secrets and all; or a log that lost the content
	}
	if redactedPrompt(c) {
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
		if ConfigDigest(&filled) == digest {
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
			t.config, t.secretsLost, t.delegate = nil, false, nil
		}
	}
}

// stampConfig records on task, a new task of the session, the configuration of
// the agent it names among the state's agents (ConfigDigest); its content is
// stored in its own stream (SessionActor.storeConfig), never with the task. A task
// naming an agent the state does not have records none: it fails before any effect.
func (s *SessionState) stampConfig(task *messages.TaskSubmitted) {
	// The same digest the fold compares the task's with (foldConfig): computed
	// once per agent and state, not again when the task is folded.
	task.ConfigDigest, task.Config = s.liveDigest(task.Agent, s.agents.recordRules()), nil
}

// WithConfigs hands the state the recorded configurations its tasks may name, by
// digest (LoadConfigs): a task that names one of them and recorded no content of
// its own (TaskSubmitted.Config) runs under it when its agent's configuration is
// another now. Call it before the first Apply; a task naming a digest it does not
// hand runs under its agent's configuration now, as one whose log lost the
// content. It returns s.
func (s *SessionState) WithConfigs(configs map[string]*messages.AgentConfig) *SessionState {
	digests := make([]string, 0, len(configs))
	for d, c := range configs {
		if c != nil {
			digests = append(digests, d)
		}
	}
	slices.Sort(digests) // no map order on the replay path
	for _, d := range digests {
		if !slices.ContainsFunc(s.configs, func(k knownConfig) bool { return k.digest == d }) {
			s.configs = append(s.configs, knownConfig{digest: d, config: configs[d]})
		}
	}
	return s
}

// NamedConfigs returns the digests of the configurations that the tasks among a
// session's events name without holding them (rules 7 and later: the
// configurations' streams hold them), sorted, each once.
func NamedConfigs(events []messages.Envelope) []string {
	var out []string
	for _, e := range events {
		if e.Type != messages.TypeTaskSubmitted {
			continue
		}
		var t struct {
			Rules  int             `json:"rules"`
			Digest string          `json:"config_digest"`
			Config json.RawMessage `json:"config"`
		}
		if json.Unmarshal(e.Payload, &t) != nil || t.Rules < rulesConfig || t.Digest == "" ||
			len(t.Config) > 0 && string(t.Config) != "null" || slices.Contains(out, t.Digest) {
			continue // the fold refuses what does not decode
		}
		out = append(out, t.Digest)
	}
	slices.Sort(out)
	return out
}

// StreamReader reads a stream of the log (EventStore's Read, eventlog.Log's).
type StreamReader interface {
	Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error)
}

// LoadConfigs reads the configurations of digests from their streams in r
// (messages.ConfigStream), for WithConfigs. A digest whose stream is empty, or
// holds no configuration of that digest, is left out: its tasks run as in a log
// that lost the content.
func LoadConfigs(ctx context.Context, r StreamReader, digests []string) (map[string]*messages.AgentConfig, error) {
	out := make(map[string]*messages.AgentConfig, len(digests))
	for _, d := range digests {
		events, err := r.Read(ctx, messages.ConfigStream(d), 1)
		if err != nil {
			return nil, fmt.Errorf("read the configuration %s: %w", d, err)
		}
		if c, ok, err := messages.RecordedConfig(d, events); err == nil && ok {
			out[d] = c
		}
	}
	return out, nil
}

// ConfigEvents returns the events of the configurations' streams of digests (the
// ones a session's events name, NamedConfigs) in r, in their order: what an export
// of the session carries besides its events. A digest r holds no configuration of
// is left out. It takes the digests, not the events, so that a session read a page
// at a time names them without being held whole.
func ConfigEvents(ctx context.Context, r StreamReader, digests []string) ([]messages.Envelope, error) {
	var out []messages.Envelope
	for _, d := range digests {
		stream, err := r.Read(ctx, messages.ConfigStream(d), 1)
		if err != nil {
			return nil, fmt.Errorf("read the configuration %s: %w", d, err)
		}
		if _, ok, err := messages.RecordedConfig(d, stream); err == nil && ok {
			out = append(out, stream[0])
		}
	}
	return out, nil
}

// liveConfigs returns the digests of the configurations of as's agents now, as
// new tasks record them and as tasks of the rules before rulesRoster did (a
// session of those, recovered, reads none of them from the log).
func liveConfigs(as *Agents) map[string]bool {
	out := map[string]bool{}
	for _, d := range as.digests {
		out[d] = true
	}
	if as.recordRules() >= rulesRoster && supportedRules(rulesRoster-1) {
		for _, a := range append([]Agent{as.Default}, slices.Collect(maps.Values(as.Named))...) {
			c := a.configOf(rulesRoster - 1)
			out[ConfigDigest(&c)] = true
		}
	}
	return out
}

// storedConfigs are the digests of the configurations a node's sessions stored in
// their streams (or found there) since it started: each is written once per node.
type storedConfigs struct {
	mu      sync.Mutex
	digests map[string]bool
}

func (s *storedConfigs) has(d string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.digests[d]
}

func (s *storedConfigs) add(d string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.digests == nil {
		s.digests = map[string]bool{}
	}
	s.digests[d] = true
}
