package actors

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/troupe-run/troupe/internal/textclip"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// Agent configures the function-calling agent a session runs.
type Agent struct {
	// Name is recorded on events; "default" when empty.
	Name string
	// SystemPrompt opens every conversation.
	SystemPrompt string
	// Roster are the node's agents as its delegate tool describes them, in the
	// node's order (NewDelegateTool; a planner's PlanAgents): recorded with its
	// configuration from decision rules 10 when it has that tool (roster.go).
	Roster []messages.RosterAgent
	// Model is the model's name as recorded on ModelRequested events.
	Model string
	// Models, when set, are the agent's own chain of models by name, its model
	// first (Model is then Models[0]) and its fallbacks after: its requests ask for
	// that chain (llm.Request.Models). Empty: the node's model and fallbacks.
	Models []string
	// recordedModel: Models is the one model of a task's recorded configuration,
	// which the node deciding it does not configure (withConfig): a node that has
	// no route to it performs the call with its own model (SessionDeps.Routable).
	recordedModel bool
	// Tools the agent may call, in the order given (keep it stable: it is part of
	// the prompt prefix). Without Disclosure, every request offers them all.
	Tools []messages.ToolSpec
	// Disclosure, when set, picks the tools each request offers (progressive
	// disclosure: the rest are loaded on the model's demand). A call to any of Tools
	// is still performed; a call to a tool outside Tools is answered as unknown.
	Disclosure ToolDisclosure
	// Catalog, when set, offers more tools, whose set can change while the node runs
	// (the tools of MCP servers, package mcp). It is read at each decision: without
	// Disclosure the model is offered Tools and the catalog's tools together, sorted
	// by name (a catalog tool named like one of Tools is left out); with one, the
	// disclosure is handed the catalog's tools (CatalogTools) and picks among them
	// too. Either way the tool section stays byte-identical from step to step until
	// the catalog changes (or, with Disclosure, something is loaded).
	Catalog ToolCatalog
	// MaxSteps bounds the model calls of one task (default 10).
	MaxSteps int
	// Chains are the tool chains among Tools, by name: the session runs a call of one
	// step by step, each step an effect of its own (chain.go).
	Chains map[string]*tools.ChainTool
	// Protocol is the paradigm's way of calling tools: empty for function calling
	// (native tool calls when the model has them), llm.ProtocolReAct for the text
	// protocol even with a model that has them. Its requests carry it.
	Protocol string
	// Paradigm, when set, works the agent's tasks beyond its tool loop (plan and
	// execute, reflection, …: paradigm.go). A session folds its tasks' paradigm
	// state only when it was given its agents (SessionState.WithAgents).
	Paradigm Paradigm

	// Stop conditions besides MaxSteps (stops.go).

	// MaxTokens is the token budget of a task that sets none
	// (messages.TaskSubmitted.MaxTokens): the prompt and completion tokens of its
	// model calls together; 0 means none. A task whose tokens reached its budget
	// makes no further model call and requests no tool call: it fails with
	// messages.ReasonTokenBudget. A final answer is kept even when its own tokens
	// crossed the budget: they are spent by then, and the answer is what they bought.
	MaxTokens int
	// MaxCostUSD is the cost budget, in US dollars, of a task that sets none
	// (messages.TaskSubmitted.MaxCostUSD): the cost of its model calls
	// (messages.Usage.CostUSD) and its sub-agents' together; 0 means none. It stops a
	// task as MaxTokens does, with messages.ReasonCostBudget.
	MaxCostUSD float64
	// LoopRepeats stops a task (messages.ReasonLoop) when its model requests the same
	// call, the same tool with the same arguments (byte-identical, or the same JSON
	// value), for the LoopRepeats-th time: that request is not performed. 0 means
	// DefaultLoopRepeats; LoopOff turns the check off.
	LoopRepeats int
	// LoopStaleSteps stops a task (messages.ReasonLoop) when LoopStaleSteps steps in a
	// row brought no new information: each tool result of each of them had been seen
	// before in the task (the same tool with the same result or error). 0 means
	// DefaultLoopStaleSteps; LoopOff turns the check off.
	LoopStaleSteps int
	// SingleCall is the simple paradigm: a task is one model call, offered no tools,
	// whose reply's text is the task's output. A reply that requests tool calls
	// anyway is answered by its text when it has some (the calls are not performed),
	// and fails the task with messages.ReasonModelError when it has none.
	SingleCall bool
	// Approvals names the tools whose calls wait for a human's approval before they
	// are performed ("approval: required" in an agents file; approvals.go).
	Approvals map[string]bool
	// ApprovalTimeout rejects a call still waiting for approval this long after it
	// was requested; 0 waits for ever.
	ApprovalTimeout time.Duration
	// Context bounds what each model call is sent (context.go): the window, the
	// tokens reserved for the answer, the conversation's messages considered, and
	// what each task gathers for it from Sources (gather.go).
	Context ContextOptions
	// Sources are the tools a task's gathered context comes from (gather.go).
	Sources ContextSources
}

// Agents are the agents a session runs: Default for a task that names none (or
// "default"), Named for the others (an agents file's), by name.
type Agents struct {
	Default Agent
	Named   map[string]Agent
	// Rules is the version of the decision rules a new task is recorded under
	// (TaskSubmitted.Rules); 0 means this build's, ContextRules. A cluster being
	// upgraded to a build with newer rules pins it to the oldest build's version, so
	// that a task a new node records can go on on an old one (which fails a task
	// recorded under rules it does not have: ReasonUnsupportedRules); the pin is
	// lifted once every node runs the new build. It must be a version this build
	// has (MinContextRules to ContextRules; CheckRecordRules).
	Rules int

	// digests are the digests of the agents' configurations, by name ("" for
	// Default), when they were computed once for agents that many states share
	// (SessionDeps: a node's sessions); nil when each state computes its own.
	// Never written once set.
	digests map[string]string
}

// withDigests returns as with the digests of its agents' configurations computed.
func (as Agents) withDigests() Agents {
	as.digests = make(map[string]string, 1+len(as.Named))
	c := as.Default.configOf(as.recordRules())
	as.digests[""] = ConfigDigest(&c)
	for name, a := range as.Named {
		c := a.configOf(as.recordRules())
		as.digests[name] = ConfigDigest(&c)
	}
	return as
}

// For returns the agent a task naming name runs, and false when there is none.
func (as Agents) For(name string) (Agent, bool) {
	if defaultAgent(name) {
		return as.Default, true
	}
	a, ok := as.Named[name]
	return a, ok
}

// defaultAgent reports whether a task naming name runs the default agent.
func defaultAgent(name string) bool { return name == "" || name == "default" }

// maxStepsError is the error of a task stopped by its max steps, max, after steps
// model calls. More calls than max were made only when the agent's max_steps was
// lowered while the task ran (a node restarted with another configuration): the
// error says so, rather than that it stopped after max calls.
func maxStepsError(steps, max int) string {
	if steps > max {
		return fmt.Sprintf("stopped after %d model calls without a final answer: its max steps are %d, fewer than it had made (its agent's max_steps was lowered while it ran)", steps, max)
	}
	return fmt.Sprintf("stopped after %d model calls without a final answer", max)
}

func (a *Agent) maxSteps(t *taskState) int {
	if t.Spec.MaxSteps > 0 {
		return t.Spec.MaxSteps
	}
	if a.MaxSteps > 0 {
		return a.MaxSteps
	}
	return 10
}

func (a *Agent) hasTool(name string) bool {
	for _, s := range a.Tools {
		if s.Name == name {
			return true
		}
	}
	if a.Catalog != nil {
		_, ok := a.Catalog.Tool(name)
		return ok
	}
	return false
}

func (a Agent) toolNames() []string {
	return specNames(a.ToolSpecs())
}

func callNames(calls []messages.ToolCall) []string {
	n := make([]string, len(calls))
	for i, c := range calls {
		n[i] = c.Name
	}
	return n
}

func specNames(specs []messages.ToolSpec) []string {
	if len(specs) == 0 {
		return nil
	}
	if m := lastSpecNames.Load(); m != nil && m.first == &specs[0] && len(m.names) == len(specs) {
		return m.names
	}
	n := make([]string, len(specs))
	for i, s := range specs {
		n[i] = s.Name
	}
	lastSpecNames.Store(&specNamesMemo{first: &specs[0], names: n})
	return n
}

// lastSpecNames memoizes specNames for the tool specs it was asked last: an
// agent's offer is one slice from call to call, whose names every model.requested
// lists. The memo holds the slice, so its address is not reused while it is kept;
// the slices are never changed once offered, and the names are only read.
var lastSpecNames atomic.Pointer[specNamesMemo]

type specNamesMemo struct {
	first *messages.ToolSpec
	names []string
}

// offer returns the tools a request offers, given the session's recorded loads
// folded (nil for none), and the section the disclosure adds to the system prompt.
func (a *Agent) offer(loads *ToolLoads) ([]messages.ToolSpec, string) {
	if a.SingleCall {
		return nil, ""
	}
	if a.Disclosure == nil {
		return a.compressionTools(a.toolSpecs()), ""
	}
	catalog := CatalogTools(a.Catalog)
	specs, section := DiscloseLoads(a.Disclosure, loads, catalog)
	if b, ok := a.Disclosure.(BoundedDisclosure); ok && section != "" && (a.Context.rules == 0 || a.Context.rules >= rulesSectionWithin) {
		section = b.BoundedSection(catalog)
	}
	return a.compressionTools(specs), section
}

// Tools whose recorded results load more tools into a session's requests
// (ToolDisclosure).
const (
	ToolLoadTools   = "load_tools"
	ToolSearchTools = "search_tools"
)

// ToolDisclosure picks the tools each model request of a session offers. What a
// session has loaded is part of its folded state: the results of its successful
// load_tools and search_tools calls, recorded as ToolCallCompleted events like any
// tool's, so a session refolded after a restart or in replay offers the same tools.
type ToolDisclosure interface {
	// Disclose returns the specs a request offers, sorted by name, and the section
	// the system prompt gains (the groups to load, how to search; "" for none), given
	// the session's loads in the order they were recorded and the agent's catalog
	// tools now (CatalogTools; nil without a catalog). It must be a pure function of
	// the two: the same loads and catalog give the same bytes. The caller must not
	// modify the specs.
	Disclose(loads []ToolLoad, catalog []tools.Tool) (specs []messages.ToolSpec, section string)
}

// BoundedDisclosure is a ToolDisclosure whose section has a form bounded in size
// however large the catalog grows: from decision rules 9 a request's system prompt
// takes it instead of Disclose's.
type BoundedDisclosure interface {
	ToolDisclosure
	// BoundedSection returns the section Disclose returns for catalog, within a
	// bound of the disclosure's; a pure function of catalog, as Disclose is.
	BoundedSection(catalog []tools.Tool) string
}

// ToolLoad is the recorded result of a load_tools or search_tools call.
type ToolLoad struct {
	Tool   string
	Result string
}

// ToolSpecs returns the tools offered to the model now: Tools, in their order, when
// there is no Catalog; otherwise Tools and the catalog's tools sorted by name. The
// result shares its schemas with Tools and the catalog: do not modify it.
func (a Agent) ToolSpecs() []messages.ToolSpec { return a.toolSpecs() }

// toolSpecs is ToolSpecs without the copy of the agent (half a kilobyte) that its
// value receiver makes: the context of each model call reads it (offer).
func (a *Agent) toolSpecs() []messages.ToolSpec {
	if a.Catalog == nil {
		return a.Tools
	}
	return mergeSpecs(a.Tools, a.Catalog.Specs())
}

// mergeSpecs returns base and the specs of more not named like one of base, sorted
// by name; base itself when more adds nothing.
func mergeSpecs(base, more []messages.ToolSpec) []messages.ToolSpec {
	if len(more) == 0 {
		return base
	}
	out := make([]messages.ToolSpec, 0, len(base)+len(more))
	out = append(out, base...)
	for _, s := range more {
		if !slices.ContainsFunc(base, func(t messages.ToolSpec) bool { return t.Name == s.Name }) {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(x, y messages.ToolSpec) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// phase is where a task stands in the function-calling loop.
type phase int

const (
	phaseQueued     phase = iota // submitted while another task runs
	phaseNeedModel               // next: ask the model
	phaseAwaitModel              // a ModelRequested has no ModelResponded yet
	phaseGotReply                // a ModelResponded has not been acted on yet
	phaseAwaitTools              // some ToolCallRequested have no ToolCallCompleted
	phaseDone
)

type callState struct {
	eventID string
	// ts is the time of its request (Envelope.TS, Unix microseconds): a chain's
	// call measures its latency from its first step's (chain.go).
	ts int64
	// keySeq is the seq of its key, a key of the session (effectKeyOf): the key
	// is SessionState.callKey (a callState fits a smaller size class without it).
	keySeq uint64
	req    messages.ToolCallRequested
	done   bool
	result messages.ToolCallCompleted
	// steps are the requested steps of a tool chain's call, in order (chain.go).
	steps []*callState
	// approval is the call's approval, once one was requested (approvals.go).
	approval *approval
}

type taskState struct {
	ID  string // the TaskSubmitted event ID; the correlation ID of the task's events
	Seq uint64
	// Spec is the task's payload as folded, and reply its latest model call's
	// answer (noReply before the first): both are the payloads the fold was given,
	// never written through, so that a task's state does not hold copies of them
	// (it fits a smaller size class).
	Spec  *messages.TaskSubmitted
	phase phase
	Steps int
	Usage messages.Usage
	// sub is what the task's tool calls spent on models on its behalf (its
	// sub-agents: ToolCallCompleted.Usage), nil while they spent nothing: few
	// tasks have sub-agents, and without it taskState fits a smaller size class.
	sub      *subSpend
	Status   string
	Output   string
	Error    string
	Note     string // the paradigm's note on a completed task's answer
	modelID  string // event ID of the pending ModelRequested
	model    messages.ModelRequested
	modelSeq uint64 // the seq of the pending ModelRequested's key, of this session (effectKeyOf)
	modelTS  int64  // its time (Envelope.TS), which names the call outside the log (pendingModelTS)
	reply    *messages.ModelResponded
	replyID  string
	calls    []*callState
	// run is the paradigm's state of the task (nil for the loop alone); pending
	// its model call in flight, aux its tool calls, in the order requested.
	run     taskRun
	pending *auxModel
	aux     []*callState
	// Reason is the reason of the task's TaskFailed.
	Reason string
	// loop is what loop detection has folded (stops.go).
	loop loopState
	// start is where the task's input is in the session's conversation.
	start int
	// gather is the task's gathered context (gather.go).
	gather gatherState
	// rules is the version of the decision rules the task runs under, as recorded
	// with it (rules.go).
	rules int
	// config is the recorded configuration of its agent the task runs under, when
	// it is not the agent's own now (config.go); nil: the agent's.
	config *messages.AgentConfig
	// secretsLost says that config's system prompt held secrets, redacted in the
	// log, that none of the agents' prompts hold now (restoreSecrets): the task
	// fails rather than send its model "[REDACTED]" in their place.
	secretsLost bool
	// delegate is the delegate tool's spec as config's roster renders it, made
	// once (rostered).
	delegate *messages.ToolSpec
}

// noReply is a task's reply before its first model call is answered.
var noReply messages.ModelResponded

// SessionState is a session folded from its events. The zero value is not usable:
// start from NewSessionState.
type SessionState struct {
	SessionID string
	// LastSeq is the seq of the latest applied event.
	LastSeq uint64
	// LastTS is the timestamp of the latest applied event.
	LastTS  int64
	history []messages.ChatMessage
	tasks   []*taskState
	// No task before tasks[unqueued] waits its turn: a task leaves phaseQueued
	// once and never returns to it, so next and queuedTask look from there
	// (without it, a refold of n tasks looked at every earlier task at each
	// task's end: n²/2 looks).
	unqueued int
	active   *taskState
	// lastEnded is the task whose end was recorded last (the highest-seq
	// task.completed or task.failed): the one Status reports on when none runs.
	// Tasks end in the order they were submitted, but for one that failed while
	// it waited its turn (decideQueued), whose end can come before an earlier's.
	lastEnded *taskState
	seen      map[string]struct{}
	// unversioned is the rules version Verify assumes of tasks recorded with none,
	// by task ID (rules.go); a task not in it runs under version 1.
	unversioned map[string]int
	// loads are the results of the session's successful load_tools and search_tools
	// calls, in order, folded as each is applied: what its requests offer
	// (Agent.Disclosure) is read from them, at a cost that does not grow with them.
	// nil until the first.
	loads *ToolLoads
	// agents are the agents its tasks may name, for their paradigms (WithAgents):
	// never nil, and never written through (the session actors share theirs).
	agents *Agents
	// lastID is the ID of the latest applied event.
	lastID string
	// approvals are every approval the session requested, by the key of its call
	// (nil until the first); approvalOrder the same, in the order they were requested.
	approvals     map[string]*approval
	approvalOrder []*approval
	// ctx caches what building a request's context counts (context.go).
	ctx contextCache
	// compress is what the agents' conversation compression folded (compress.go),
	// nil while it folded nothing (comp); digestScan is where the next digest of a
	// large tool result is looked for (proactive compression), set by every step of
	// the loop.
	compress   *compressState
	digestScan int
	// configs are the configurations of agents the session's tasks recorded, in
	// the order recorded (config.go); digests memoizes the digests of the agents'
	// own, by name.
	configs []knownConfig
	digests map[string]string
	// depth is how deep a sub-agent the session is: the deepest of its tasks
	// (TaskDepth), which a child's first task, or a fork of a child's, sets. A
	// new task with no parent is stamped with it (Depth, stampRules): a client's
	// later task of such a session delegates no deeper than its first could.
	depth int
	// key memoizes keyAt: the key of a decided event is also its event's ID.
	key struct {
		seq uint64
		s   string
	}
}

// keyAt returns effectKey(s.SessionID, seq), made once for the seq asked last.
func (s *SessionState) keyAt(seq uint64) string {
	if s.key.seq != seq || s.key.s == "" {
		s.key.seq, s.key.s = seq, effectKey(s.SessionID, seq)
	}
	return s.key.s
}

// Depth is how deep a sub-agent the session is: the deepest of its tasks
// (TaskDepth); 0 for a session that is no sub-agent, nor a fork of one.
func (s *SessionState) Depth() int { return s.depth }

// NewSessionState returns the state of a session with no events.
func NewSessionState(sessionID string) *SessionState {
	return &SessionState{SessionID: sessionID, seen: map[string]struct{}{}, agents: &noAgents}
}

// noAgents are the agents of a state given none (WithAgents): never written.
var noAgents Agents

// WithAgents tells the state the agents its tasks may name, so that the tasks of
// an agent with a paradigm fold the paradigm's state; call it before the first
// Apply. It returns s.
func (s *SessionState) WithAgents(as Agents) *SessionState {
	s.agents = &as
	return s
}

// withSharedAgents is WithAgents with agents that the caller never changes, shared
// with other states rather than copied into this one.
func (s *SessionState) withSharedAgents(as *Agents) *SessionState {
	s.agents = as
	return s
}

// Seen reports whether an event with this ID was applied (ingress deduplication).
func (s *SessionState) Seen(id string) bool {
	_, ok := s.seen[id]
	return ok
}

// Active reports the running task's ID, or "" when the session is idle.
func (s *SessionState) Active() string {
	if s.active == nil {
		return ""
	}
	return s.active.ID
}

// Status reports the session's status: running while a task has not ended (tasks
// submitted while another runs wait their turn, and a session resumes them after a
// restart), else the status, output and error of its latest task; "" for a session
// without tasks. It agrees with eventlog.SessionStatus.
func (s *SessionState) Status() (status, output, errMsg string) {
	if len(s.tasks) == 0 {
		return "", "", ""
	}
	if s.active != nil { // the fold activates the first queued task as soon as one ends
		return messages.StatusRunning, "", ""
	}
	t := s.latestEnded()
	return t.Status, t.Output, t.Error
}

// latestEnded is the task whose end was recorded last, when no task runs and the
// session has tasks (lastEnded; the latest submitted before any ended).
func (s *SessionState) latestEnded() *taskState {
	if s.lastEnded != nil {
		return s.lastEnded
	}
	return s.tasks[len(s.tasks)-1]
}

// Apply folds one event into the state. Events must come in seq order without gaps.
func (s *SessionState) Apply(e messages.Envelope) error {
	if e.SessionID != s.SessionID {
		return fmt.Errorf("actors: event %s of session %s applied to session %s", e.ID, e.SessionID, s.SessionID)
	}
	if e.Seq != s.LastSeq+1 {
		return fmt.Errorf("actors: session %s: event seq %d follows %d: the log has a gap or a duplicate", s.SessionID, e.Seq, s.LastSeq)
	}
	p, err := decodeFolded(e)
	if err != nil {
		return err
	}
	return s.apply(e, p)
}

// decodeFolded is e.Decode for the fold, which reads no model request's context
// report (applyLoop, applyParadigm): a model request's report is skipped, not
// decoded. It is most of a long session's log (the items of every context sent),
// and decoding it was most of a refold's time and memory. The payload is still
// checked to be JSON; a payload that does not decode so is decoded by e.Decode,
// for its error.
func decodeFolded(e messages.Envelope) (messages.Payload, error) {
	if e.Type != messages.TypeModelRequested {
		return e.Decode()
	}
	if cur, ok := messages.CurrentVersion(e.Type); !ok || e.Version > cur {
		return e.Decode()
	}
	var p struct {
		messages.ModelRequested
		Context skippedJSON `json:"context"`
	}
	payload := e.Payload
	if rest, ok := withoutLastReport(payload); ok {
		payload = rest
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return e.Decode()
	}
	return &p.ModelRequested, nil
}

// reportKey opens the context report's member of a model request's payload.
const reportKey = `,"context":`

// withoutLastReport returns payload, a model request's, without its context
// report when that is its last member, as Envelope encodes it; ok is false when it
// is not, or when the report is not one JSON value (messages.ValidJSON, a third of
// encoding/json's check). Then encoding/json neither checks nor skips the report:
// it was two scans of most of the payload. Its rest, one JSON object that is not
// {}, is one exactly when payload is one (the report's member appended to the
// rest's), and decodes as payload does but for the report (decodeFolded's
// json.Unmarshal checks it, and the fold falls back to Envelope.Decode on any
// error).
func withoutLastReport(payload []byte) (rest []byte, ok bool) {
	end := len(payload)
	for end > 0 && isJSONSpace(payload[end-1]) {
		end--
	}
	if end == 0 || payload[end-1] != '}' {
		return nil, false
	}
	at := bytes.LastIndex(payload[:end], []byte(reportKey))
	if at < 0 {
		return nil, false
	}
	before := at
	for before > 0 && isJSONSpace(payload[before-1]) {
		before--
	}
	if before == 0 || payload[before-1] == '{' || !messages.ValidJSON(payload[at+len(reportKey):end-1]) {
		return nil, false
	}
	rest = make([]byte, at+1)
	copy(rest, payload[:at])
	rest[at] = '}'
	return rest, true
}

// isJSONSpace reports whether c is whitespace in JSON.
func isJSONSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// skippedJSON is a JSON value left undecoded.
type skippedJSON struct{}

// UnmarshalJSON implements json.Unmarshaler.
func (*skippedJSON) UnmarshalJSON([]byte) error { return nil }

// applyEncoded folds e, whose payload is the JSON encoding of p (an event the agent
// decided, or the answer of an effect it encoded), sparing the decoding of a payload
// just encoded. It is Apply whenever decoding e.Payload gives p back, which holds for
// these payloads (integers, floats, strings and slices of structs of them), except:
// a string with invalid UTF-8, which encoding/json writes as \ufffd, and an empty
// list of tool calls or tools, which it leaves out and which decodes as nil. Those are decoded,
// so that the state is exactly what a refold of the log (recovery, replay) gives.
func (s *SessionState) applyEncoded(e messages.Envelope, p messages.Payload) error {
	if e.SessionID != s.SessionID || e.Seq != s.LastSeq+1 || bytes.Contains(e.Payload, []byte(`\ufffd`)) {
		return s.Apply(e)
	}
	switch p := p.(type) {
	case *messages.ModelResponded:
		if p.Message.ToolCalls != nil && len(p.Message.ToolCalls) == 0 {
			return s.Apply(e)
		}
	case *messages.ModelRequested:
		if p.Tools != nil && len(p.Tools) == 0 {
			return s.Apply(e)
		}
	}
	if _, ok := messages.CurrentVersion(e.Type); !ok || e.Type != p.MessageType() {
		return s.Apply(e)
	}
	return s.apply(e, p)
}

// apply folds event e whose payload is p.
func (s *SessionState) apply(e messages.Envelope, p messages.Payload) error {
	s.LastSeq = e.Seq
	s.LastTS = e.TS
	s.lastID = e.ID
	s.seen[e.ID] = struct{}{}
	s.noteRulesEvidence(e, p)
	if err := s.applyLoop(e, p); err != nil {
		return err
	}
	s.foldGather(e, p)
	s.foldRun(e, p)
	s.foldCompression(e, p)
	return nil
}

// applyLoop folds event e into the session and its tool loop.
func (s *SessionState) applyLoop(e messages.Envelope, p messages.Payload) error {
	t := s.active
	switch p := p.(type) {
	case *messages.TaskSubmitted:
		nt := &taskState{ID: e.ID, Seq: e.Seq, Spec: p, reply: &noReply, phase: phaseQueued, Status: messages.StatusRunning, rules: s.taskRules(e.ID, p)}
		s.foldConfig(nt, p)
		s.tasks = append(s.tasks, nt)
		s.depth = max(s.depth, TaskDepth(p))
		if s.active == nil {
			s.activate(nt)
		}
	case *messages.ModelRequested:
		key, err := s.effectKeyOf(e, p.Key)
		if err != nil {
			return err
		}
		if t == nil || e.CorrelationID != t.ID || s.applyParadigm(e, p, key) {
			return nil
		}
		t.phase, t.Steps, t.model, t.modelID, t.modelSeq, t.modelTS = phaseAwaitModel, p.Step, *p, e.ID, key.Seq, e.TS
		// The report of its context rides on the event: the state reads none of it,
		// and every task, once ended, would keep its last one.
		t.model.Context = nil
	case *messages.ModelResponded:
		if s.applyParadigm(e, p, messages.EffectKey{}) {
			return nil
		}
		if t == nil || t.phase != phaseAwaitModel || p.Key != t.model.Key {
			return nil // a stale or duplicate answer
		}
		t.phase, t.reply, t.replyID = phaseGotReply, p, e.ID
		t.Usage = t.Usage.Add(p.Usage)
		if p.Error == "" {
			s.history = append(s.history, p.Message)
			t.loop.noteReply(p.Message.ToolCalls)
		}
	case *messages.ToolCallRequested:
		key, err := s.effectKeyOf(e, p.Key)
		if err != nil {
			return err
		}
		if t == nil || e.CorrelationID != t.ID || s.applyParadigm(e, p, key) {
			return nil
		}
		if p.Chain != "" {
			t.addChainStep(e.ID, e.TS, key, *p)
			return nil
		}
		if t.phase == phaseGotReply {
			t.calls = t.calls[:0]
		}
		t.phase = phaseAwaitTools
		t.calls = append(t.calls, &callState{eventID: e.ID, ts: e.TS, keySeq: key.Seq, req: *p})
	case *messages.ToolCallCompleted:
		if t != nil && e.CorrelationID == t.ID {
			t.noteSubUsage(p)
		} else if ended := s.endedTask(e.CorrelationID); ended != nil {
			// A delegate call's answer recorded after its task ended (LateAnswer):
			// what the child spent completes the task's figures, and nothing else.
			s.foldLateAnswer(ended, p)
			return nil
		}
		if s.applyParadigm(e, p, messages.EffectKey{}) {
			return nil
		}
		if t == nil || t.phase != phaseAwaitTools || t.completeChainStep(*p) {
			return nil
		}
		all := true
		for _, c := range t.calls {
			if c.req.Key == p.Key && !c.done {
				c.done, c.result = true, *p
				if p.Error == "" && (p.Tool == ToolLoadTools || p.Tool == ToolSearchTools) {
					if s.loads == nil {
						s.loads = &ToolLoads{}
					}
					s.loads.add(ToolLoad{Tool: p.Tool, Result: p.Result})
				}
			}
			all = all && c.done
		}
		if all {
			if t.rules >= rulesRefusedArgumentsCut {
				s.cutRefusedArguments(t.calls)
			}
			for _, c := range t.calls {
				s.history = append(s.history, toolMessage(c.result))
			}
			t.loop.noteStep(t.calls)
			t.phase = phaseNeedModel
		}
	case *messages.ApprovalRequested:
		if t != nil && e.CorrelationID == t.ID {
			s.applyApprovalRequested(t, e, p)
		}
	case *messages.ApprovalResolved:
		s.applyApprovalResolved(e, p)
	case *messages.SessionForked:
		s.forgetConfigs()
	case *messages.TaskCompleted:
		if t != nil && e.CorrelationID == t.ID {
			t.phase, t.Status, t.Output, t.Note = phaseDone, messages.StatusCompleted, p.Output, p.Note
			s.lastEnded = t
			s.next()
		}
	case *messages.TaskFailed:
		if t != nil && e.CorrelationID == t.ID {
			t.phase, t.Status, t.Error, t.Reason = phaseDone, messages.StatusFailed, p.Error, p.Reason
			s.lastEnded = t
			s.next()
		} else if q := s.queuedTask(e.CorrelationID); q != nil {
			// A task that failed while it waited its turn (decideQueued): it never
			// started, and the running task goes on.
			q.phase, q.Status, q.Error, q.Reason = phaseDone, messages.StatusFailed, p.Error, p.Reason
			s.lastEnded = q
		}
	}
	return nil
}

// queuedTask returns the task with this ID when it waits its turn, else nil.
func (s *SessionState) queuedTask(id string) *taskState {
	for _, t := range s.tasks[s.unqueued:] {
		if t.ID == id && t.phase == phaseQueued {
			return t
		}
	}
	return nil
}

// QueuedTask returns the ID of the task named name (its name, TaskName, or its
// ID) while it waits its turn behind the running one, recorded under rules 10 or
// later (rulesQueuedDeadline); "" when none does. Only such a task may end while
// it waits (a cancellation): a build of older rules, which a node pinned to them
// for a rolling upgrade may hand the session to, folds no end of a queued task,
// and would run it after its end, as it records none at its deadline.
func (s *SessionState) QueuedTask(name string) string {
	for _, t := range s.tasks[s.unqueued:] {
		if t.phase == phaseQueued && t.rules >= rulesQueuedDeadline && (t.ID == name || t.Spec.TaskID == name) {
			return t.ID
		}
	}
	return ""
}

// endedTask returns the task with this ID when it ended, else nil.
func (s *SessionState) endedTask(id string) *taskState {
	for _, t := range s.tasks {
		if t.ID == id && t.phase == phaseDone {
			return t
		}
	}
	return nil
}

// noteSubUsage adds what the call p answers spent on models to the task's
// SubUsage, once per call: the loop's, a paradigm's and a chain's calls alike.
func (t *taskState) noteSubUsage(p *messages.ToolCallCompleted) {
	if p.Usage.IsZero() {
		return
	}
	if t.sub == nil {
		t.sub = &subSpend{}
	} else if slices.Contains(t.sub.keys, p.Key) {
		return
	}
	t.sub.keys = append(t.sub.keys, p.Key)
	t.sub.usage = t.sub.usage.Add(p.Usage)
}

// subSpend is what a task's tool calls spent on models on its behalf: the sum, and
// the keys of the calls counted (each once). It counts against the task's token
// budget, and is not in taskState.Usage.
type subSpend struct {
	usage messages.Usage
	keys  []string
}

// SubUsage returns what the task's tool calls spent on models on its behalf.
func (t *taskState) SubUsage() messages.Usage {
	if t.sub == nil {
		return messages.Usage{}
	}
	return t.sub.usage
}

// callKey returns the key of the call c, one of the session's.
func (s *SessionState) callKey(c *callState) messages.EffectKey {
	return messages.EffectKey{SessionID: s.SessionID, Seq: c.keySeq}
}

// effectKeyOf reads the key of the effect an event requests: a key of this session
// (Decide makes them; a fork re-derives them for the new session). Anything else is
// a corrupt log: the effect could not be issued with its key.
func (s *SessionState) effectKeyOf(e messages.Envelope, text string) (messages.EffectKey, error) {
	k, err := messages.ParseEffectKey(text)
	if err != nil {
		return k, fmt.Errorf("actors: session %s: event %d requests an effect: %w", s.SessionID, e.Seq, err)
	}
	if k.SessionID != s.SessionID {
		return k, fmt.Errorf("actors: session %s: event %d requests an effect keyed %s, of another session", s.SessionID, e.Seq, text)
	}
	return k, nil
}

// refusedForLength matches the error of a call whose arguments were refused
// unread for their length (tools.CallLimited, tools.ArgumentParser), as recorded:
// the tool's name, the arguments' length in bytes and the limit.
var refusedForLength = regexp.MustCompile(`^[^\n]*: invalid arguments: the arguments are (\d+) bytes long; the limit is \d+$`)

// The head and tail of a refused call's arguments its reply keeps in the
// conversation (cutRefusedArguments).
const (
	refusedArgumentsHead = 1 << 10
	refusedArgumentsTail = 256
)

// cutRefusedArguments replaces, in the reply whose calls are calls (the latest
// message of the conversation), the arguments of each call refused for their
// length with a JSON object holding their head and tail, {"refused_arguments":
// "…"} (rules rulesRefusedArgumentsCut). Whole, they stayed in every later
// prompt, where a cut never shortens a call's arguments (they would no longer be
// JSON): a reply of 1 MB of arguments refused as too long made every request
// after it larger than the window, and the task failed with context_overflow
// rather than let the model try again shorter. A call is cut only when its
// error gives its arguments' very length. The reply's event keeps them whole.
func (s *SessionState) cutRefusedArguments(calls []*callState) {
	last := len(s.history) - 1
	if last < 0 || len(s.history[last].ToolCalls) != len(calls) {
		return
	}
	m := &s.history[last]
	var cut []messages.ToolCall
	for i, c := range calls {
		tc := m.ToolCalls[i]
		if tc.ID != c.req.CallID || len(tc.Arguments) <= refusedArgumentsHead+refusedArgumentsTail {
			continue
		}
		g := refusedForLength.FindStringSubmatch(c.result.Error)
		if g == nil || g[1] != strconv.Itoa(len(tc.Arguments)) {
			continue
		}
		if cut == nil {
			cut = slices.Clone(m.ToolCalls) // the reply's own calls are the event's
		}
		b, _ := json.Marshal(map[string]string{"refused_arguments": textclip.Middle(tc.Arguments, refusedArgumentsHead, refusedArgumentsTail, " of these arguments")})
		cut[i].Arguments = string(b)
	}
	if cut == nil {
		return
	}
	m.ToolCalls = cut
	if last < len(s.ctx.turns) {
		s.ctx.turns[last] = 0 // its tokens are counted again
	}
}

func toolMessage(r messages.ToolCallCompleted) messages.ChatMessage {
	content := r.Result
	if r.Error != "" {
		content = "error: " + r.Error
	}
	return messages.ChatMessage{Role: messages.RoleTool, ToolCallID: r.CallID, Name: r.Tool, Content: content}
}

func (s *SessionState) activate(t *taskState) {
	s.active = t
	t.phase = phaseNeedModel
	if a, ok := s.agents.For(t.Spec.Agent); ok && a.Paradigm != nil {
		// Its planner's agents, its team's members, its critic's rubric: as it
		// recorded them (rules 10: roster.go).
		a = t.rostered(a)
		t.run = a.Paradigm.begin(*t.Spec)
	}
	t.start = len(s.history)
	if s.history == nil {
		// Room for a short task's turns (its input, a tool call and its result, the
		// answer) in one array rather than three.
		s.history = make([]messages.ChatMessage, 0, 4)
	}
	s.history = append(s.history, messages.ChatMessage{Role: messages.RoleUser, Content: t.Spec.Input})
}

func (s *SessionState) next() {
	if s.active != nil {
		s.active.loop = loopState{} // an ended task's loop detection is done with
	}
	s.active = nil
	for i := s.unqueued; i < len(s.tasks); i++ {
		if t := s.tasks[i]; t.phase == phaseQueued {
			s.unqueued = i
			s.activate(t)
			return
		}
	}
	s.unqueued = len(s.tasks)
}

// Decision is an event the agent decided to record next: its payload, the event that
// caused it and the task it belongs to.
type Decision struct {
	Payload     messages.Payload
	CausationID string
	TaskID      string
}

// Decide returns the next event the agent records, or nil when it waits for an effect
// (a model or tool result) or has nothing to do. nextSeq is the seq the event will get;
// nowUS is the current time in Unix microseconds (only deadlines read it). Decide is
// pure: the same state, nextSeq and nowUS always give the same decision.
func (s *SessionState) Decide(a Agent, nextSeq uint64, nowUS int64) *Decision {
	return s.DecideAmong(Agents{Default: a}, nextSeq, nowUS)
}

// DecideAmong is Decide with the agent the active task names (TaskSubmitted.Agent)
// among as. A task naming an agent that as does not have fails with
// messages.ReasonUnknownAgent.
func (s *SessionState) DecideAmong(as Agents, nextSeq uint64, nowUS int64) *Decision {
	d := s.decideAmong(&as, nextSeq, nowUS)
	if d != nil && d.TaskID == s.active.ID { // not a queued task's end (decideQueued)
		s.active.stampSubUsage(d.Payload)
	}
	return d
}

// stampSubUsage sets, on a decision that ends task t, what its sub-agents spent.
func (t *taskState) stampSubUsage(p messages.Payload) {
	switch p := p.(type) {
	case *messages.TaskCompleted:
		p.SubAgentsUsage = t.SubUsage()
	case *messages.TaskFailed:
		p.SubAgentsUsage = t.SubUsage()
	}
}

// secretsLostError is the error of the messages.ReasonModelError a task fails
// with when the system prompt recorded with it held a secret that no agent of the
// deciding node holds now (taskState.secretsLost): a limit of that node, which
// Verify tells apart from a model's error by these words.
const secretsLostError = "the system prompt recorded with the task held a secret, redacted in the log, " +
	"that no agent of this node holds now among the same words: the task cannot go on under the configuration it began with (give the node that prompt back, or run the task again)"

// decideAmong is DecideAmong but for the sub-agents' usage on a task's end.
//
// The agent is used by pointer, not copied from call to call (an Agent is half a
// kilobyte, and a session decides several times per step): the default agent in as
// itself, a named one or one under older rules copied once.
func (s *SessionState) decideAmong(as *Agents, nextSeq uint64, nowUS int64) *Decision {
	t := s.active
	if t == nil {
		return nil
	}
	if dec := s.decideQueued(nowUS); dec != nil {
		return dec
	}
	d := func(p messages.Payload, cause string) *Decision {
		return &Decision{Payload: p, CausationID: cause, TaskID: t.ID}
	}
	a := &as.Default
	var own Agent // a named agent, or one under older rules
	if name := t.Spec.Agent; name != "" && name != "default" {
		var ok bool
		if own, ok = as.Named[name]; !ok {
			return d(&messages.TaskFailed{Reason: messages.ReasonUnknownAgent, Error: fmt.Sprintf("unknown agent %q: this node does not run it", t.Spec.Agent),
				Steps: t.Steps, Usage: t.Usage}, t.ID)
		}
		a = &own
	}
	// A task is decided under the rules it was recorded with (rules.go).
	if !supportedRules(t.rules) {
		return d(&messages.TaskFailed{Reason: messages.ReasonUnsupportedRules, Error: (&RulesError{Seq: t.Seq, TaskID: t.ID, Version: t.rules}).Error(),
			Steps: t.Steps, Usage: t.Usage}, t.ID)
	}
	if t.secretsLost {
		return d(&messages.TaskFailed{Reason: messages.ReasonModelError, Error: secretsLostError, Steps: t.Steps, Usage: t.Usage}, t.ID)
	}
	if t.rules < ContextRules || t.config != nil {
		own = t.runs(*a) // its rules, its recorded configuration (config.go)
		a = &own
	}
	if t.Spec.DeadlineUS > 0 && nowUS >= t.Spec.DeadlineUS {
		return d(&messages.TaskFailed{Reason: messages.ReasonDeadline, Error: "the task's deadline passed", Steps: t.Steps, Usage: t.Usage}, t.ID)
	}
	// Before its first move, the task gathers its context (gather.go).
	if dec, wait := s.decideGather(a, t, nextSeq); dec != nil || wait {
		return dec
	}
	if a.Paradigm != nil {
		return s.decideParadigm(*a, t, nextSeq, nowUS)
	}
	return s.decideLoop(a, t, nextSeq, nowUS)
}

// queuedDeadlineError is the error of a task that failed at its deadline while
// it waited for the tasks before it (decideQueued).
const queuedDeadlineError = "the task's deadline passed while it waited for the session's earlier task to end: it never started"

// decideQueued fails, from rules 10 (rulesQueuedDeadline), the first task waiting
// its turn whose deadline passed at nowUS: messages.ReasonDeadline, no steps and no
// usage, since it never started. The running task goes on, and the others keep
// their order. Under older rules such a task waited, and failed at its deadline
// only once it started.
func (s *SessionState) decideQueued(nowUS int64) *Decision {
	for _, q := range s.tasks {
		if q.phase != phaseQueued || q.rules < rulesQueuedDeadline || !supportedRules(q.rules) {
			continue
		}
		if q.Spec.DeadlineUS > 0 && nowUS >= q.Spec.DeadlineUS {
			return &Decision{Payload: &messages.TaskFailed{Reason: messages.ReasonDeadline, Error: queuedDeadlineError}, CausationID: q.ID, TaskID: q.ID}
		}
	}
	return nil
}

// NextDeadline reports the earliest deadline the session's decisions wait for, in
// Unix microseconds, or 0 for none: the running task's (Deadline), and from rules
// 10 those of the tasks waiting their turn (decideQueued).
func (s *SessionState) NextDeadline() int64 {
	next := s.Deadline()
	if s.active == nil {
		return next
	}
	for _, q := range s.tasks {
		if q.phase != phaseQueued || q.rules < rulesQueuedDeadline || !supportedRules(q.rules) || q.Spec.DeadlineUS == 0 {
			continue
		}
		if next == 0 || q.Spec.DeadlineUS < next {
			next = q.Spec.DeadlineUS
		}
	}
	return next
}

// decideLoop returns the next event of the agent's tool loop for task t, or nil
// when it waits.
func (s *SessionState) decideLoop(a *Agent, t *taskState, nextSeq uint64, nowUS int64) *Decision {
	d := func(p messages.Payload, cause string) *Decision {
		return &Decision{Payload: p, CausationID: cause, TaskID: t.ID}
	}
	switch t.phase {
	case phaseNeedModel:
		if max := a.maxSteps(t); t.Steps >= max {
			return d(&messages.TaskFailed{Reason: messages.ReasonMaxSteps, Error: maxStepsError(t.Steps, max), Steps: t.Steps, Usage: t.Usage}, t.ID)
		}
		if f := a.overBudget(t); f != nil {
			return d(f, t.ID)
		}
		if f := a.staleSteps(t); f != nil {
			return d(f, t.ID)
		}
		if dec, wait := s.decideCompression(a, t, nextSeq); wait || dec != nil {
			return dec
		}
		req, report := s.loopRequest(a)
		if f := overWindow(t.rules, t, report); f != nil {
			return d(f, t.ID)
		}
		req.Step = t.Steps + 1
		return d(&messages.ModelRequested{
			Key: s.keyAt(nextSeq), Model: a.Model, Step: t.Steps + 1,
			Messages: len(req.Messages), PromptHash: llm.PromptHash(req), Tools: specNames(req.Tools), Protocol: a.Protocol,
			Context: report,
		}, t.ID)
	case phaseGotReply:
		r := *t.reply
		if r.Error != "" {
			return d(&messages.TaskFailed{Reason: messages.ReasonModelError, Error: r.Error, Steps: t.Steps, Usage: t.Usage}, t.replyID)
		}
		if a.SingleCall && len(r.Message.ToolCalls) > 0 && r.Message.Content == "" {
			return d(&messages.TaskFailed{Reason: messages.ReasonModelError,
				Error: fmt.Sprintf("the model answered with tool calls (%s) and no text; the simple paradigm offers no tools: its answer is the reply's text",
					strings.Join(callNames(r.Message.ToolCalls), ", ")), Steps: t.Steps, Usage: t.Usage}, t.replyID)
		}
		if len(r.Message.ToolCalls) == 0 || a.SingleCall {
			if f := unwholeAnswer(t); f != nil {
				return d(f, t.replyID)
			}
			return d(&messages.TaskCompleted{Output: r.Message.Content, Steps: t.Steps, Usage: t.Usage}, t.replyID)
		}
		if f := a.overBudget(t); f != nil {
			return d(f, t.replyID)
		}
		if f := a.repeatedCall(t); f != nil {
			return d(f, t.replyID)
		}
		c := r.Message.ToolCalls[0]
		return d(&messages.ToolCallRequested{Key: s.keyAt(nextSeq), CallID: c.ID, Tool: c.Name, Arguments: c.Arguments, Step: t.Steps}, t.replyID)
	case phaseAwaitTools:
		// Request the remaining calls of the reply, one decision each.
		if calls := t.reply.Message.ToolCalls; len(t.calls) < len(calls) {
			c := calls[len(t.calls)]
			return d(&messages.ToolCallRequested{Key: s.keyAt(nextSeq), CallID: c.ID, Tool: c.Name, Arguments: c.Arguments, Step: t.Steps}, t.replyID)
		}
		if dec := s.decideRecall(a, t); dec != nil {
			return dec
		}
		// A call to a tool the agent does not have is answered here, without an effect.
		for _, c := range t.calls {
			if !c.done && !a.hasTool(c.req.Tool) {
				return d(&messages.ToolCallCompleted{Key: c.req.Key, CallID: c.req.CallID, Tool: c.req.Tool,
					Error: fmt.Sprintf("unknown tool %q; available tools: %s", c.req.Tool, strings.Join(specNames(s.offered(a)), ", "))}, c.eventID)
			}
		}
		if dec := decideApprovals(a, t, nowUS); dec != nil {
			return d(dec.Payload, dec.CausationID)
		}
		if dec := decideChains(a, t, s.SessionID, nextSeq, nowUS); dec != nil {
			return d(dec.Payload, dec.CausationID)
		}
	}
	return nil
}

// offered returns the tools the session's requests offer now.
func (s *SessionState) offered(a *Agent) []messages.ToolSpec {
	specs, _ := a.offer(s.loads)
	return specs
}

// effectKey is the text of the idempotency key of the effect requested by the event
// at seq (messages.EffectKey).
func effectKey(sessionID string, seq uint64) string {
	return messages.EffectKey{SessionID: sessionID, Seq: seq}.String()
}

// Request builds the model request for the active task's next step from the state,
// within the agent's context budget (Agent.Context; context.go builds it). Its system
// message is the stable prefix, the agent's SystemPrompt and then the tools' section
// (Disclosure), followed by what is stable for the task: its core memory
// (messages.TaskSubmitted.Memory, recorded with the task: a refold or a replay
// builds the same prompt) and its paradigm's section; then the conversation, what
// of it fits. A paradigm's own call is its prompt, fitted to the same budget.
func (s *SessionState) Request(a Agent) llm.Request {
	a = s.runAgent(a) // as the request was decided (DecideAmong)
	if req, ok := s.compressionRequest(&a); ok {
		return req
	}
	if t := s.active; t != nil && t.pending != nil && t.run != nil {
		req, _ := s.paradigmRequest(a, t, t.pending.req.Purpose)
		req.Step, req.Key, req.Purpose = t.Steps, t.pending.req.Key, t.pending.req.Purpose
		return req
	}
	req, _ := s.loopRequest(&a)
	return req
}

// loopRequest builds the request of the loop's next model call and the report of
// its context.
func (s *SessionState) loopRequest(a *Agent) (llm.Request, *messages.ContextReport) {
	msgs, specs, report := s.loopContext(a)
	req := llm.Request{Messages: msgs, Tools: specs, Protocol: a.Protocol}
	if s.active != nil {
		req.Step = s.active.Steps
		if s.active.phase == phaseAwaitModel {
			req.Key = s.active.model.Key
		}
	}
	return req, report
}

// paradigmRequest builds the request of a paradigm's model call for purpose,
// fitted to the agent's context budget, and the report of its context.
func (s *SessionState) paradigmRequest(a Agent, t *taskState, purpose string) (llm.Request, *messages.ContextReport) {
	return s.paradigmContext(a, t, t.run.prompt(&view{s: s, t: t, a: a}, purpose))
}

// ActiveAgent returns the agent the running task names ("" for the default, or
// when no task runs).
func (s *SessionState) ActiveAgent() string {
	if s.active == nil {
		return ""
	}
	return s.active.Spec.Agent
}

// coreMemorySection is the part of the system prompt that holds a task's core
// memory blocks (messages.TaskSubmitted.Memory), as they stood when it was
// submitted. The blocks' values cannot write its tags (memory.RenderBlocks).
func coreMemorySection(blocks string) string {
	return "<" + memory.CoreSectionTag + ">\nYour core memory blocks, always in your context, as they stood when this task began " +
		"(an edit you make shows here from the next task on):\n" + strings.TrimSuffix(blocks, "\n") + "\n</" + memory.CoreSectionTag + ">"
}

// PendingModel returns the key of the model call that was requested and not
// answered, if any, and the ID of its request event.
func (s *SessionState) PendingModel() (key messages.EffectKey, eventID string, ok bool) {
	if t := s.active; t != nil && t.pending != nil {
		return t.pending.key, t.pending.eventID, true
	}
	if t := s.active; t != nil && t.phase == phaseAwaitModel {
		return messages.EffectKey{SessionID: s.SessionID, Seq: t.modelSeq}, t.modelID, true
	}
	return messages.EffectKey{}, "", false
}

// pendingModelTS is the time of the request event of the pending model call
// (PendingModel), which with the task names the call outside the log
// (EffectKey.Outward); 0 when none is pending.
func (s *SessionState) pendingModelTS() int64 {
	switch t := s.active; {
	case t == nil:
		return 0
	case t.pending != nil:
		return t.pending.ts
	case t.phase == phaseAwaitModel:
		return t.modelTS
	}
	return 0
}

// PendingCalls returns the tool calls that were requested and not answered, in order,
// with the IDs of their request events: the calls to perform. A call waiting for an
// approval, or rejected, is not among them.
func (s *SessionState) PendingCalls() []PendingCall { return s.appendPendingCalls(nil) }

// appendPendingCalls appends the pending calls (PendingCalls) to out: the session
// actor's go to a buffer on its stack.
func (s *SessionState) appendPendingCalls(out []PendingCall) []PendingCall {
	t := s.active
	if t == nil {
		return out
	}
	if n := countPending(t.aux); n > 0 {
		out = slices.Grow(out, n)
		for _, c := range t.aux {
			if !c.done {
				out = append(out, PendingCall{EventID: c.eventID, TS: c.ts, Key: s.callKey(c), Request: c.req})
			}
		}
	}
	if t.phase != phaseAwaitTools {
		return out
	}
	for _, c := range t.calls {
		if c.waitsForApproval() {
			continue // not to be performed, or not yet
		}
		for _, st := range c.steps {
			if !st.done {
				out = append(out, PendingCall{EventID: st.eventID, TS: st.ts, Key: s.callKey(st), Request: st.req})
			}
		}
		if !c.done && len(c.steps) == 0 {
			out = append(out, PendingCall{EventID: c.eventID, TS: c.ts, Key: s.callKey(c), Request: c.req})
		}
	}
	return out
}

// countPending returns how many of calls have no result yet.
func countPending(calls []*callState) int {
	n := 0
	for _, c := range calls {
		if !c.done {
			n++
		}
	}
	return n
}

// PendingCall is a requested, unanswered tool call.
type PendingCall struct {
	EventID string
	// TS is the time of its request's event (Envelope.TS, Unix microseconds),
	// which with the task names the call outside the log (EffectKey.Outward).
	TS      int64
	Key     messages.EffectKey
	Request messages.ToolCallRequested
}

// Progress reports the running task's model calls and token usage so far (zero when
// the session is idle).
func (s *SessionState) Progress() (steps int, usage messages.Usage) {
	if s.active == nil {
		return 0, messages.Usage{}
	}
	return s.active.Steps, s.active.Usage
}

// SubAgentsUsage reports what the running task's sub-agents spent so far
// (messages.TaskCompleted.SubAgentsUsage), zero when the session is idle.
func (s *SessionState) SubAgentsUsage() messages.Usage {
	if s.active == nil {
		return messages.Usage{}
	}
	return s.active.SubUsage()
}

// Deadline reports the running task's deadline in Unix microseconds, or 0 when it has
// none or the session is idle.
func (s *SessionState) Deadline() int64 {
	if s.active == nil {
		return 0
	}
	return s.active.Spec.DeadlineUS
}

// TaskReason reports why the task with this ID failed (messages.TaskFailed.Reason);
// "" for a task that did not fail, or that the session does not have.
func (s *SessionState) TaskReason(id string) string {
	for _, t := range s.tasks {
		if t.ID == id {
			return t.Reason
		}
	}
	return ""
}

// StatusReason reports why the session's latest task failed, when Status reports
// messages.StatusFailed; "" otherwise.
func (s *SessionState) StatusReason() string {
	if len(s.tasks) == 0 || s.active != nil {
		return ""
	}
	return s.latestEnded().Reason
}

// ReplyTopic reports the topic the task with this ID asked its result to be sent to.
func (s *SessionState) ReplyTopic(taskID string) string {
	for _, t := range s.tasks {
		if t.ID == taskID {
			return t.Spec.ReplyTopic
		}
	}
	return ""
}

// Note returns the note of the session's latest task when it completed with one
// (messages.TaskCompleted.Note), as Status reports its outcome; "" otherwise.
func (s *SessionState) Note() string {
	if len(s.tasks) == 0 || s.active != nil {
		return ""
	}
	return s.latestEnded().Note
}

// TaskNote returns the note of the task whose ID is id (see Note).
func (s *SessionState) TaskNote(id string) string {
	for _, t := range s.tasks {
		if t.ID == id {
			return t.Note
		}
	}
	return ""
}

// TaskName returns the ID a task is known by outside the log, for its result
// (messages.TaskResult.TaskID): the task_id its client named it by, else id, the ID
// of its task.submitted event.
func (s *SessionState) TaskName(id string) string {
	for _, t := range s.tasks {
		if t.ID == id {
			return cmp.Or(t.Spec.TaskID, id)
		}
	}
	return id
}

// StatusTask returns the name (TaskName) of the task Status reports on: the
// running one, else the latest; "" for a session without tasks.
func (s *SessionState) StatusTask() string {
	t := s.active
	if t == nil && len(s.tasks) > 0 {
		t = s.latestEnded()
	}
	if t == nil {
		return ""
	}
	return cmp.Or(t.Spec.TaskID, t.ID)
}

// TaskSeq returns the seq of the task.submitted event of the task whose ID is
// id; false when the session has no such task.
func (s *SessionState) TaskSeq(id string) (uint64, bool) {
	for _, t := range s.tasks {
		if t.ID == id {
			return t.Seq, true
		}
	}
	return 0, false
}

// QueuedTasks returns how many tasks wait their turn behind the running one.
func (s *SessionState) QueuedTasks() int {
	n := 0
	for _, t := range s.tasks[s.unqueued:] {
		if t.phase == phaseQueued && t != s.active {
			n++
		}
	}
	return n
}

// TaskNamed returns the ID of the task whose name (TaskName) or ID is name, the
// latest such; false when the session has none.
func (s *SessionState) TaskNamed(name string) (string, bool) {
	for i := len(s.tasks) - 1; i >= 0; i-- {
		if t := s.tasks[i]; t.ID == name || t.Spec.TaskID == name {
			return t.ID, true
		}
	}
	return "", false
}

// CancelledTask says why a cancellation of the task named name (its name or
// ID, as TaskNamed finds it) cancels nothing: ErrTaskCancelled, wrapped, when
// the task ended cancelled; ErrNoRunningTask otherwise.
func (s *SessionState) CancelledTask(name string) error {
	if id, ok := s.TaskNamed(name); ok && s.TaskReason(id) == messages.ReasonCancelled {
		if t := s.endedTask(id); t != nil && t.Status == messages.StatusFailed {
			return fmt.Errorf("%w: task %s", ErrTaskCancelled, id)
		}
	}
	return ErrNoRunningTask
}

// TaskResult returns the task whose ID is id as its result reads it (its
// SessionID left for the caller to set), and whether the session has the task.
func (s *SessionState) TaskResult(id string) (messages.TaskResult, bool) {
	status, output, errMsg, ok := s.Task(id)
	if !ok {
		return messages.TaskResult{}, false
	}
	return messages.TaskResult{TaskID: s.TaskName(id), Status: status, Output: output, Error: errMsg,
		Reason: s.TaskReason(id), Note: s.TaskNote(id)}, true
}

// Task returns the outcome of the task whose ID is id.
func (s *SessionState) Task(id string) (status, output, errMsg string, ok bool) {
	for _, t := range s.tasks {
		if t.ID == id {
			return t.Status, t.Output, t.Error, true
		}
	}
	return "", "", "", false
}
