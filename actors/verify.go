package actors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// Divergence is the first place where an agent's decisions differ from a recorded
// session's.
type Divergence struct {
	// Seq is the recorded event the agent should have produced.
	Seq uint64 `json:"seq"`
	// Step is the task's model-call step at that point.
	Step int `json:"step"`
	// Expected is the recorded event (type and payload); Actual is what the agent
	// decided instead ("nothing" when it decided to wait).
	Expected string `json:"expected"`
	Actual   string `json:"actual"`
	// At is the byte offset in Expected and Actual of their first difference.
	At int `json:"at"`
}

// String says where d is, with Expected and Actual clipped around their first
// difference (Clip): a payload may be megabytes. Whole prints them whole.
func (d *Divergence) String() string {
	e, a := Clip(d.Expected, d.At), Clip(d.Actual, d.At)
	s := d.format(e, a)
	if e != d.Expected || a != d.Actual {
		s += fmt.Sprintf("\n  (clipped around the first difference, at byte %d of %d recorded and %d now)", d.At, len(d.Expected), len(d.Actual))
	}
	return s
}

// Whole is String with Expected and Actual whole.
func (d *Divergence) Whole() string { return d.format(d.Expected, d.Actual) }

func (d *Divergence) format(expected, actual string) string {
	return fmt.Sprintf("diverges at seq %d (step %d):\n  recorded: %s\n  now:      %s", d.Seq, d.Step, expected, actual)
}

// What Clip keeps of a long text: its head, and a window around the offset.
const (
	clipHead   = 80
	clipBefore = 160
	clipAfter  = 240
)

// Clip returns s when it is short, else its first 80 bytes (an event's type and
// the start of its payload) and the bytes from 160 before at to 240 after it, each
// cut marked with the number of bytes left out; cuts fall between characters.
func Clip(s string, at int) string {
	if len(s) <= clipHead+clipBefore+clipAfter+64 {
		return s
	}
	at = min(max(at, 0), len(s))
	start, end := runeStart(s, max(at-clipBefore, 0)), runeStart(s, min(at+clipAfter, len(s)))
	var b strings.Builder
	if head := runeStart(s, clipHead); start > head+32 {
		fmt.Fprintf(&b, "%s[… %d bytes …]", s[:head], start-head)
	} else {
		start = 0
	}
	b.WriteString(s[start:end])
	if end < len(s) {
		fmt.Fprintf(&b, "[… %d more bytes]", len(s)-end)
	}
	return b.String()
}

// runeStart is i, or the start of the character of s that i is inside.
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// firstDifference is the byte offset of the first difference of a and b (the
// shorter's length when it is a prefix of the other), at a character's start.
func firstDifference(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return runeStart(a, i)
}

// Verify re-runs the agent's decisions against a recorded session: every recorded
// input and effect result (tasks, model answers, tool results, cancellations,
// tasks failed because their session's actor failed on them again and again,
// humans' answers to approvals) is fed
// from the log — no model is called and no tool runs — and every event the agent
// decided (model and tool requests, completions, failures) must come out the same.
// It returns nil when the agent is deterministic against the recording, or the first
// divergence. Deadlines are judged at each recorded event's own timestamp. Each task
// is re-decided under the decision rules it was recorded with (ContextRules); a
// session with a task recorded under rules this build does not have is not
// re-decided: the error is a *RulesError.
func Verify(a Agent, events []messages.Envelope) (*Divergence, error) {
	return VerifyAmong(Agents{Default: a}, events)
}

// VerifyAmong is Verify of a session whose tasks may name agents of as.
func VerifyAmong(as Agents, events []messages.Envelope) (*Divergence, error) {
	return VerifyFrom(as, events, 1)
}

// VerifyFrom is VerifyAmong that re-decides only the events from seq from on:
// the events before it are folded as they are, as a node that takes the session
// up there folds them. A fork's own part (from its session.forked event on) was
// decided by the agents of the node that continued it, which may run another
// model than the parent's, so it is verified with those agents, and its first
// part with the parent's.
func VerifyFrom(as Agents, events []messages.Envelope, from uint64) (*Divergence, error) {
	return VerifyRecorded(as, events, from, nil)
}

// VerifyRecorded is VerifyFrom with the recorded configurations the session's
// tasks name (NamedConfigs, read with LoadConfigs): a task runs under its own as
// it did live, whatever as's agents are configured with now.
func VerifyRecorded(as Agents, events []messages.Envelope, from uint64, configs map[string]*messages.AgentConfig) (*Divergence, error) {
	r, err := VerifyReport(as, events, from, configs)
	return r.Divergence, err
}

// LimitFailure is a task's failure that the node deciding it met for a limit of
// its own, not for anything the task's agent decided: the task named an agent the
// node did not run (messages.ReasonUnknownAgent), was recorded under decision
// rules the node did not have (messages.ReasonUnsupportedRules), or its recorded
// system prompt held a secret the node had lost (messages.ReasonModelError, with
// the words of secretsLostError).
type LimitFailure struct {
	// Seq is the task.failed event, TaskID its task.
	Seq    uint64 `json:"seq"`
	TaskID string `json:"task_id"`
	Reason string `json:"reason"`
	Error  string `json:"error"`
}

func (f LimitFailure) String() string {
	return fmt.Sprintf("the task %s failed at seq %d for a limit of the node that decided it (%s: %s)", f.TaskID, f.Seq, f.Reason, f.Error)
}

// limitFailure returns p as a LimitFailure of the event at seq of task, when it is one.
func limitFailure(p messages.Payload, seq uint64, task string) (LimitFailure, bool) {
	f, ok := p.(*messages.TaskFailed)
	if !ok {
		return LimitFailure{}, false
	}
	switch {
	case f.Reason == messages.ReasonUnknownAgent, f.Reason == messages.ReasonUnsupportedRules,
		f.Reason == messages.ReasonModelError && f.Error == secretsLostError:
		return LimitFailure{Seq: seq, TaskID: task, Reason: f.Reason, Error: f.Error}, true
	}
	return LimitFailure{}, false
}

// limitFailure is limitFailure of d's payload, decided as the event at seq.
func (d *Decision) limitFailure(seq uint64) (LimitFailure, bool) {
	if d == nil {
		return LimitFailure{}, false
	}
	return limitFailure(d.Payload, seq, d.TaskID)
}

// UndecidableError says that a task cannot be re-decided here: where the session
// recorded the agent's decision, the agents given to Verify fail the task for a
// limit of their own (Limit: an agent they do not define, a secret of the
// recorded prompt they do not hold). It is no divergence: the session's decisions
// are not known to differ.
type UndecidableError struct {
	Limit LimitFailure `json:"limit"`
	// Recorded is the event the session recorded there (its type).
	Recorded string `json:"recorded"`
}

func (e *UndecidableError) Error() string {
	return fmt.Sprintf("the task %s cannot be re-decided here: where the session recorded %s at seq %d, the agents given fail it (%s: %s)",
		e.Limit.TaskID, e.Recorded, e.Limit.Seq, e.Limit.Reason, e.Limit.Error)
}

// VerifyReport is VerifyRecorded that also says which of the session's recorded
// task failures it took as recorded (Limits): a task the recording node failed
// for a limit of its own (LimitFailure) is not re-decided past its failure by
// agents that lack the limit (a later build, the agents file it lacked): its
// failure is the record of what happened. Agents that fail a task for a limit of
// their own where the session recorded a decision return an *UndecidableError.
func VerifyReport(as Agents, events []messages.Envelope, from uint64, configs map[string]*messages.AgentConfig) (VerifyResult, error) {
	return VerifyPages(as, PagesOf(events), from, configs)
}

// Pages reads a session's events from its first, in seq order, a page at a
// time: each call calls fn with each page in turn (never an empty one) and stops
// at fn's first error, which it returns. Each call reads the session again, and
// must find the same events.
type Pages func(fn func(page []messages.Envelope) error) error

// PagesOf is the Pages of events held whole: one page.
func PagesOf(events []messages.Envelope) Pages {
	return func(fn func(page []messages.Envelope) error) error {
		if len(events) == 0 {
			return nil
		}
		return fn(events)
	}
}

// errVerifyDone stops the reading of a session's pages once its divergence is found.
var errVerifyDone = errors.New("actors: verify: divergence found")

// VerifyPages is VerifyReport of a session read a page at a time, never held
// whole (a session of millions of events, or of a few huge ones): a first
// reading checks that its seqs are whole and its tasks' rules supported, the
// next fold and re-decide it event by event, a page held at a time besides the
// fold's state. A session recorded with no rules version that diverges under
// the version first assumed is read again under the next.
func VerifyPages(as Agents, pages Pages, from uint64, configs map[string]*messages.AgentConfig) (VerifyResult, error) {
	scan := NewVerifyScan()
	if err := pages(func(page []messages.Envelope) error {
		scan.Add(page)
		return nil
	}); err != nil {
		return VerifyResult{}, err
	}
	return VerifyScanned(as, pages, scan, from, configs)
}

// VerifyScan is the first reading of VerifyPages, given the session's pages in
// turn (Add) by a caller that reads them for its own ends too: one reading
// serves both.
type VerifyScan struct {
	n                           uint64
	wholeErr, rulesErr, scanErr error
	// A task recorded with no rules version ran under version 1, or under
	// version 2 on a build from before the version was recorded: it is
	// re-decided under 1 unless its events show 2 (verifyRules), and under 2
	// when 1 diverges in it.
	unversioned map[string]int
}

// NewVerifyScan returns a VerifyScan of no pages yet.
func NewVerifyScan() *VerifyScan { return &VerifyScan{unversioned: map[string]int{}} }

// Add scans the session's next page.
func (s *VerifyScan) Add(page []messages.Envelope) {
	if s.wholeErr == nil {
		s.wholeErr = checkWhole(page, s.n)
	}
	s.n += uint64(len(page))
	if s.rulesErr == nil {
		s.rulesErr = CheckRules(page)
	}
	if s.scanErr == nil {
		s.scanErr = addVerifyRules(s.unversioned, page)
	}
}

// VerifyScanned is VerifyPages of a session whose every page scan was given
// (in seq order, as pages reads them): it reads the session again to fold and
// re-decide it, and once more for each task recorded with no rules version that
// diverges under the version first assumed. The fold cannot be that first
// reading: it needs what only the whole session says before its first event
// is re-decided (each task's rules version, and that no seq is missing).
func VerifyScanned(as Agents, pages Pages, scan *VerifyScan, from uint64, configs map[string]*messages.AgentConfig) (VerifyResult, error) {
	unversioned := scan.unversioned
	switch {
	case scan.n == 0:
		return VerifyResult{}, fmt.Errorf("actors: verify: the session has no events")
	case scan.wholeErr != nil:
		return VerifyResult{}, scan.wholeErr
	case scan.rulesErr != nil:
		return VerifyResult{}, scan.rulesErr
	case scan.scanErr != nil:
		return VerifyResult{}, scan.scanErr
	}
	// The divergence reported is the one found furthest into the session.
	var furthest VerifyResult
	for {
		r, err := verifyUnder(as, pages, unversioned, from, configs)
		if err != nil || r.Divergence == nil {
			return r, err
		}
		div := r.Divergence
		if furthest.Divergence == nil || div.Seq > furthest.Divergence.Seq {
			furthest = r
		}
		if v, ok := unversioned[r.task]; !ok || v == rulesGather {
			return furthest, nil
		}
		unversioned[r.task] = rulesGather
	}
}

// checkWhole returns an error naming the first seq that events (a session's
// events after its first before ones) lack, or hold out of order: events
// missing from a log (lost, or deleted by hand) left the agent waiting for what
// they answered, which verify reported as the agent's divergence at the next
// event, its code blamed for the log's loss. Nothing is re-decided from such a
// log.
func checkWhole(events []messages.Envelope, before uint64) error {
	for i, e := range events {
		want := before + uint64(i) + 1
		switch {
		case e.Seq == want:
			continue
		case e.Seq > want:
			missing := fmt.Sprintf("seq %d", want)
			if e.Seq-want > 1 {
				missing = fmt.Sprintf("seqs %d to %d", want, e.Seq-1)
			}
			return fmt.Errorf("actors: session %s: the log lacks %s (its next event is seq %d): nothing was re-decided", e.SessionID, missing, e.Seq)
		default:
			return fmt.Errorf("actors: session %s: seq %d follows %d: the log has a duplicate or is out of order: nothing was re-decided", e.SessionID, e.Seq, want-1)
		}
	}
	return nil
}

// VerifyResult is what VerifyReport found: the first divergence (nil for none),
// and the tasks' failures for a limit of the recording node taken as recorded.
type VerifyResult struct {
	Divergence *Divergence
	Limits     []LimitFailure
	// task is the task (correlation) ID of the event at Divergence.Seq.
	task string
}

// verifyUnder is VerifyFrom with the rules versions of the tasks recorded with
// none (SessionState.unversioned).
// Only the events from seq from on are re-decided.
func verifyUnder(as Agents, pages Pages, unversioned map[string]int, from uint64, configs map[string]*messages.AgentConfig) (VerifyResult, error) {
	var (
		st *SessionState
		r  VerifyResult
	)
	err := pages(func(page []messages.Envelope) error {
		for _, e := range page {
			if st == nil {
				st = NewSessionState(e.SessionID).WithAgents(as).WithConfigs(configs)
				st.unversioned = unversioned
			}
			p, err := e.Decode()
			if err != nil {
				return err
			}
			if e.Seq >= from && decided(e, p) {
				step := 0
				if st.active != nil {
					step = st.active.Steps
				}
				d := st.DecideAmong(as, e.Seq, e.TS)
				if div := compare(d, e, p, step); div != nil && !st.decidedByEarlierTools(as, d, e, p, step) {
					// The recording node's limit: its failure is what happened, and the
					// task ends there as recorded.
					if f, ok := limitFailure(p, e.Seq, e.CorrelationID); ok {
						r.Limits = append(r.Limits, f)
					} else if f, ok := d.limitFailure(e.Seq); ok {
						return &UndecidableError{Limit: f, Recorded: string(e.Type)}
					} else {
						r.Divergence, r.task = div, e.CorrelationID
						return errVerifyDone
					}
				}
			}
			if err := st.Apply(e); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, errVerifyDone) {
		err = nil
	}
	return r, err
}

// decidedByEarlierTools reports whether d, a model request that differs from the
// recorded one, comes out as recorded when the agents offer their built-in tools
// described as an earlier build described them (tools.PriorSpecs): a tool's
// description is part of the prompt's hash, and a build that reworded one would
// otherwise find every session recorded before as diverging, where the agent
// decided the same. The request must name the same tools, with the same number
// of messages.
func (s *SessionState) decidedByEarlierTools(as Agents, d *Decision, e messages.Envelope, recorded messages.Payload, step int) bool {
	r, ok := recorded.(*messages.ModelRequested)
	if !ok || d == nil {
		return false
	}
	m, ok := d.Payload.(*messages.ModelRequested)
	if !ok || m.Messages != r.Messages || !slices.Equal(m.Tools, r.Tools) {
		return false
	}
	for i := 0; ; i++ {
		earlier, changed := agentsWithEarlierTools(as, i)
		if !changed {
			return false
		}
		if compare(s.DecideAmong(earlier, e.Seq, e.TS), e, recorded, step) == nil {
			return true
		}
	}
}

// agentsWithEarlierTools returns as with each agent's tools as the i-th earlier
// wording of them (tools.PriorSpecs; an agent with fewer keeps its earliest), and
// whether any agent had an i-th one.
func agentsWithEarlierTools(as Agents, i int) (Agents, bool) {
	changed := false
	earlier := func(a Agent) Agent {
		prior := tools.PriorSpecs(a.Tools)
		if len(prior) == 0 {
			return a
		}
		if i < len(prior) {
			changed = true
		}
		a.Tools = prior[min(i, len(prior)-1)]
		return a
	}
	out := Agents{Default: earlier(as.Default)}
	if as.Named != nil {
		out.Named = make(map[string]Agent, len(as.Named))
		for name, a := range as.Named {
			out.Named[name] = earlier(a)
		}
	}
	return out, changed
}

// decided reports whether the agent (Decide) produced this event, as opposed to an
// input or an effect's result.
func decided(e messages.Envelope, p messages.Payload) bool {
	switch p := p.(type) {
	case *messages.ModelRequested, *messages.ToolCallRequested, *messages.TaskCompleted, *messages.TeamStateUpdated,
		*messages.ApprovalRequested:
		return true
	case *messages.ApprovalResolved:
		return p.By == messages.ApprovedByTimeout // a human's answer is an input
	case *messages.TaskFailed:
		return p.Reason != messages.ReasonCancelled && p.Reason != messages.ReasonSessionFailed
	case *messages.ToolCallCompleted:
		return e.Actor == "session" // answered by the agent itself (unknown tool)
	}
	return false
}

func compare(d *Decision, e messages.Envelope, recorded messages.Payload, step int) *Divergence {
	want := describe(e.Type, recorded)
	if d == nil {
		return newDivergence(e.Seq, step, want, "nothing (the agent waits)")
	}
	d = withoutNewLatency(withoutNewReport(d, recorded), recorded)
	got := describe(d.Payload.MessageType(), d.Payload)
	if d.Payload.MessageType() != e.Type || !sameJSON(recorded, d.Payload) || d.CausationID != e.CausationID {
		if want == got && d.CausationID != e.CausationID {
			got += fmt.Sprintf(" (caused by %s, recorded %s)", d.CausationID, e.CausationID)
		}
		return newDivergence(e.Seq, step, want, got)
	}
	return nil
}

// withoutNewReport returns d without its context report when the recorded model
// request has none: it was recorded before requests carried one, and the prompt's
// hash still says whether the same prompt was built.
func withoutNewReport(d *Decision, recorded messages.Payload) *Decision {
	r, ok := recorded.(*messages.ModelRequested)
	if !ok || r.Context != nil {
		return d
	}
	m, ok := d.Payload.(*messages.ModelRequested)
	if !ok || m.Context == nil {
		return d
	}
	p := *m
	p.Context = nil
	out := *d
	out.Payload = &p
	return &out
}

// withoutNewLatency returns d without its latency when it is a chain call's result
// and the recorded one has none: it was recorded before a chain's result carried
// its latency (decideChains), and the rest still says whether it was decided alike.
func withoutNewLatency(d *Decision, recorded messages.Payload) *Decision {
	r, ok := recorded.(*messages.ToolCallCompleted)
	if !ok || r.LatencyUS != 0 {
		return d
	}
	c, ok := d.Payload.(*messages.ToolCallCompleted)
	if !ok || c.LatencyUS == 0 {
		return d
	}
	p := *c
	p.LatencyUS = 0
	out := *d
	out.Payload = &p
	return &out
}

func newDivergence(seq uint64, step int, expected, actual string) *Divergence {
	return &Divergence{Seq: seq, Step: step, Expected: expected, Actual: actual, At: firstDifference(expected, actual)}
}

func sameJSON(a, b messages.Payload) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

func describe(t messages.Type, p messages.Payload) string {
	b, err := json.Marshal(p)
	if err != nil {
		return string(t)
	}
	return fmt.Sprintf("%s %s", t, b)
}
