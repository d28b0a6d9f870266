package actors

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// A team is an agent whose paradigm is a team's pattern (Team): every member is an
// agent, and every hand-over is a message. The team's session hands a member its
// work with a call of the delegate tool (DelegateTool, {"agent": member, "task":
// text}), a tool call with a purpose: the member works it in a child session of its
// own, and the child's final answer is the call's result (an error result when the
// child fails). Routing decisions the team asks its own model for are model calls
// with the purpose "route". The team's shared state is the fold of the
// team.state_updated events the team records (messages.TeamStateUpdated): each
// member's latest answer in its section, the routing decisions, re-dispatches,
// verdicts and handoffs in the global one, and the facts members share with a
// "STATE: key = value" line. It is rendered, the same bytes for the same events,
// into every member's task and every routing prompt that follows.
//
// Like every paradigm, a team's task is a fold of its events: a team killed while
// its members work resumes by refolding, re-issues only the delegate calls that were
// requested and never answered (with the same keys, so a member's child session is
// found again, not started twice), and replay verify re-derives every decision.

// DelegateTool is the name of the tool a team hands its members their work with: the
// node's tool for sub-agents, {"agent": name, "task": text}, whose result is the
// child session's final answer.
const DelegateTool = "delegate"

// The patterns of a team (Team.Pattern).
const (
	// TeamOrchestrator routes the task to one worker: by the first of its static
	// rules whose pattern matches the task, else by its model (ModelRouting), else
	// to its fallback member; a result that fails the team's check is re-dispatched.
	TeamOrchestrator = "orchestrator"
	// TeamPipeline runs its members in sequence, each building on the answer of the
	// one before; the last one's answer is the task's.
	TeamPipeline = "pipeline"
	// TeamFanOut gives every member the task at once; its aggregator combines their
	// answers (without one, the answers are the task's answer, one after the other).
	TeamFanOut = "fan_out"
	// TeamDebate has its members propose answers (in parallel) and its judge accept
	// one or ask for another round, for at most Rounds rounds.
	TeamDebate = "debate"
	// TeamHandoff gives the task to its first member, who answers or hands the
	// conversation to a peer with a "HANDOFF: <member>: <note>" line; a member that
	// had it already, or one handoff past MaxHandoffs, ends the chain.
	TeamHandoff = "handoff"
)

// TeamPatterns are the patterns a team may have, in the order documentation lists them.
var TeamPatterns = []string{TeamOrchestrator, TeamPipeline, TeamFanOut, TeamDebate, TeamHandoff}

// Limits of a team's settings.
const (
	MaxTeamRounds     = 10
	MaxTeamHandoffs   = 20
	MaxTeamRedispatch = 5
	// teamValueCut bounds a value of the team's state as rendered into prompts
	// under decision rules 1 to 6 (rules.go): a longer one was cut, even a
	// member's answer that a hand-over had whole.
	teamValueCut = 4000
	// TeamHandOverBytes bounds, in bytes, a team member's answer as a hand-over
	// carries it (node.MaxTeamMemberResult), and from decision rules 7 a value of
	// the team's state as rendered into prompts: a member's answer shows there as
	// whole as the team received it.
	TeamHandOverBytes = 256 << 10
	// MaxHandoffNote bounds, in bytes, from decision rules 14, the note of a
	// handoff ("HANDOFF: <member>: <note>") as the task of the member it hands
	// the conversation to carries it: a longer one is cut, with a note (the
	// whole is the last line of the answer that handed over, in the team's
	// state).
	MaxHandoffNote = 1 << 10
	// teamBy is the writer of the team's own entries of its state.
	teamBy = "team"
)

// Team is a team's configuration: the paradigm of the agent that runs it
// (Agent.Paradigm, made with NewTeam). The agents it names (members, fallback,
// aggregator, judge, critic) are agents a delegate call can name.
type Team struct {
	// Pattern is one of TeamPatterns.
	Pattern string
	// Members are the team's workers (orchestrator), stages in order (pipeline),
	// branches (fan_out), proposers (debate) or peers, the first taking the task
	// (handoff).
	Members []TeamMember
	// Routes are an orchestrator's static rules, tried in order on the task's input.
	Routes []TeamRoute
	// ModelRouting has an orchestrator ask its model (purpose "route") when no rule
	// matches; an answer naming no member goes to Fallback, with the reason recorded.
	ModelRouting bool
	// Fallback is the member an orchestrator routes to when nothing else decides,
	// and the first member a failed check re-dispatches to.
	Fallback string
	// Check judges an orchestrator's worker result; one that fails it is
	// re-dispatched, at most Redispatch times.
	Check      TeamCheck
	Redispatch int
	// Aggregator is the agent that combines a fan_out's answers ("": none).
	Aggregator string
	// Judge is the agent that judges a debate's proposals.
	Judge string
	// Rounds bounds a debate's rounds (default 2).
	Rounds int
	// MaxHandoffs bounds a handoff chain's hand-overs (default 5).
	MaxHandoffs int
}

// HandOvers is the most hand-overs (delegate calls, each a member's child
// session) one task of the team makes: an orchestrator's first and its
// re-dispatches (each with its critic's review), a pipeline's stages, a fan-out's
// branches and aggregator, a debate's proposals and verdicts of every round, a
// handoff chain's peers.
func (t Team) HandOvers() int {
	switch t.Pattern {
	case TeamOrchestrator:
		n := 1 + t.Redispatch
		if t.Check.Critic != "" {
			n *= 2
		}
		return n
	case TeamPipeline:
		return len(t.Members)
	case TeamFanOut:
		if t.Aggregator != "" {
			return len(t.Members) + 1
		}
		return len(t.Members)
	case TeamDebate:
		return cmp.Or(t.Rounds, 2) * (len(t.Members) + 1)
	case TeamHandoff:
		return cmp.Or(t.MaxHandoffs, 5) + 1
	}
	return 0
}

// TeamMember is a member of a team, as the team's prompts describe it.
type TeamMember struct {
	Name        string
	Description string
	// Tools are the names of its tools, for the routing prompt and the peers' list.
	Tools []string
}

// TeamRoute is an orchestrator's static rule: a task whose input Match matches
// (a regular expression, case-insensitive; a plain keyword is one) goes to Member.
type TeamRoute struct {
	Match  string
	Member string
	re     *regexp.Regexp
}

// TeamCheck is what an orchestrator's worker result must pass. At most one of its
// kinds is set; the zero value passes every result that is not an error.
type TeamCheck struct {
	// NonEmpty fails an answer that is empty or only white space.
	NonEmpty bool
	// Regex fails an answer it does not match.
	Regex string
	// Critic is an agent that reviews the answer: its reply starts with PASS, or
	// with FAIL and what is wrong.
	Critic string
	re     *regexp.Regexp
}

// String says what the check is, for prompts and errors.
func (c TeamCheck) String() string {
	switch {
	case c.NonEmpty:
		return "non_empty"
	case c.Regex != "":
		return "regex " + strconv.Quote(c.Regex)
	case c.Critic != "":
		return "critic " + c.Critic
	}
	return "none"
}

// NewTeam returns the paradigm of a team, or what is wrong with its settings.
func NewTeam(t Team) (Paradigm, error) {
	fail := func(format string, args ...any) (Paradigm, error) {
		return nil, fmt.Errorf("team: "+format, args...)
	}
	if !slices.Contains(TeamPatterns, t.Pattern) {
		return fail("unknown pattern %q: want one of %s", t.Pattern, strings.Join(TeamPatterns, ", "))
	}
	if len(t.Members) == 0 {
		return fail("%s: no members", t.Pattern)
	}
	t.Members = slices.Clone(t.Members)
	for i, m := range t.Members {
		if m.Name == "" || m.Name == teamBy || m.Name == messages.TeamSectionGlobal {
			return fail("member %d: name %q: want an agent's name (not %q nor %q)", i+1, m.Name, teamBy, messages.TeamSectionGlobal)
		}
		if slices.ContainsFunc(t.Members[:i], func(o TeamMember) bool { return o.Name == m.Name }) {
			return fail("member %q is listed twice", m.Name)
		}
	}
	tt := &team{cfg: t}
	isMember := tt.isMember
	switch t.Pattern {
	case TeamOrchestrator:
		if !isMember(t.Fallback) {
			return fail("orchestrator: fallback %q: want one of the members (%s)", t.Fallback, tt.memberList())
		}
		tt.cfg.Routes = slices.Clone(t.Routes)
		for i := range tt.cfg.Routes {
			r := &tt.cfg.Routes[i]
			if !isMember(r.Member) {
				return fail("orchestrator: route %d: member %q: want one of the members (%s)", i+1, r.Member, tt.memberList())
			}
			re, err := regexp.Compile("(?i)" + r.Match)
			if err != nil || r.Match == "" {
				return fail("orchestrator: route %d: match %q: want a regular expression or a keyword (%v)", i+1, r.Match, err)
			}
			r.re = re
		}
		kinds := 0
		for _, set := range []bool{t.Check.NonEmpty, t.Check.Regex != "", t.Check.Critic != ""} {
			if set {
				kinds++
			}
		}
		if kinds > 1 {
			return fail("orchestrator: check: give one of non_empty, regex, critic")
		}
		if t.Check.Regex != "" {
			re, err := regexp.Compile(t.Check.Regex)
			if err != nil {
				return fail("orchestrator: check regex %q: %v", t.Check.Regex, err)
			}
			tt.cfg.Check.re = re
		}
		if t.Redispatch < 0 || t.Redispatch > MaxTeamRedispatch {
			return fail("orchestrator: redispatch %d: want 0 to %d", t.Redispatch, MaxTeamRedispatch)
		}
	case TeamDebate:
		if t.Judge == "" {
			return fail("debate: no judge")
		}
		if t.Rounds == 0 {
			tt.cfg.Rounds = 2
		}
		if tt.cfg.Rounds < 1 || tt.cfg.Rounds > MaxTeamRounds {
			return fail("debate: rounds %d: want 1 to %d", t.Rounds, MaxTeamRounds)
		}
	case TeamHandoff:
		if t.MaxHandoffs == 0 {
			tt.cfg.MaxHandoffs = 5
		}
		if tt.cfg.MaxHandoffs < 1 || tt.cfg.MaxHandoffs > MaxTeamHandoffs {
			return fail("handoff: max_handoffs %d: want 1 to %d", t.MaxHandoffs, MaxTeamHandoffs)
		}
	}
	return tt, nil
}

// team is a Team as a Paradigm.
type team struct{ cfg Team }

var _ Paradigm = (*team)(nil)

// Name implements Paradigm: "team/<pattern>".
func (t *team) Name() string { return "team/" + t.cfg.Pattern }

func (t *team) isMember(name string) bool {
	return slices.ContainsFunc(t.cfg.Members, func(m TeamMember) bool { return m.Name == name })
}

// memberNamed returns the member a model's answer names as name: the member of
// that name, or, from rules rulesMemberCase, the one member whose name it is but
// for case and surrounding white space ("Billing" for billing); ok is false when
// none is (or, but for case, more than one).
func (t *team) memberNamed(rules int, name string) (member string, ok bool) {
	if t.isMember(name) || rules < rulesMemberCase {
		return name, t.isMember(name)
	}
	name = strings.TrimSpace(name)
	for _, m := range t.cfg.Members {
		if strings.EqualFold(m.Name, name) {
			if ok {
				return name, false
			}
			member, ok = m.Name, true
		}
	}
	return cmp.Or(member, name), ok
}

func (t *team) memberList() string {
	names := make([]string, len(t.cfg.Members))
	for i, m := range t.cfg.Members {
		names[i] = m.Name
	}
	return strings.Join(names, ", ")
}

func (t *team) begin(task messages.TaskSubmitted) taskRun {
	r := &teamRun{team: t, input: task.Input, state: teamState{}, rules: rulesOf(&task)}
	switch t.cfg.Pattern {
	case TeamOrchestrator:
		for i, rt := range t.cfg.Routes {
			if rt.re.MatchString(task.Input) {
				r.dispatch(rt.Member, fmt.Sprintf("rule %d matches %q", i+1, rt.Match), "")
				return r
			}
		}
		if t.cfg.ModelRouting {
			r.needRoute = true
			return r
		}
		r.dispatch(t.cfg.Fallback, "the fallback: no rule matches", "")
	case TeamPipeline:
		r.want(teamWant{id: "stage-1", member: t.cfg.Members[0].Name, purpose: "stage", round: 1})
	case TeamFanOut:
		for _, m := range t.cfg.Members {
			r.want(teamWant{id: "branch-" + m.Name, member: m.Name, purpose: "branch"})
		}
	case TeamDebate:
		r.proposeRound(1, "")
	case TeamHandoff:
		first := t.cfg.Members[0].Name
		r.chain = []string{first}
		r.want(teamWant{id: "handoff-1", member: first, purpose: "handoff", round: 1})
	}
	return r
}

// teamRun is a team's state of one task. Everything the team decides follows from
// it; fold works out the consequences of each event (what to record in the team's
// state, whom to hand work to next, how the task ends) and decide emits them in
// order: first the state updates, then the end or the next hand-overs. Once the
// team's budget is spent (its own model calls and its members' work, stops.go),
// no hand-over is made and no failure of its pattern's ends the task (a member
// whose share ran out, its pipeline stage or aggregator failed): the task ends
// with token_budget or cost_budget instead, as an agent's does; an answer its
// pattern has is kept (from decision rules 3; rules.go).
type teamRun struct {
	team  *team
	input string
	state teamState
	// queue are the state updates fold decided on and decide has not recorded yet.
	queue []teamUpdate
	// wants are the hand-overs decided on, in order; calls, those requested, by key.
	wants []*teamWant
	calls map[string]*teamWant
	// end, once set, is how the task ends (after the queue is recorded).
	end *teamEnd
	// needRoute: an orchestrator asks its model (purpose "route"); routeKey is the
	// key of that call once requested.
	needRoute bool
	routeKey  string
	// attempts are an orchestrator's workers, one per dispatch, in order.
	attempts []string
	// chain are the members a handoff chain visited, in order.
	chain []string
	// round is a debate's current round.
	round int
	// rules is the version of the decision rules the task runs under.
	rules int
}

// teamUpdate is a state update to record, and the event it follows from.
type teamUpdate struct {
	u     messages.TeamStateUpdated
	cause string
}

// teamWant is a hand-over to a member the team decided on: a delegate call.
type teamWant struct {
	id      string // the call's ID within the task
	member  string
	purpose string // stage, branch, work, check, aggregate, propose, judge, handoff
	round   int    // a debate's round, a pipeline's stage, a handoff's hop, an attempt
	note    string // what the team tells the member besides (a failed check, a handoff note)
	subject string // the member whose answer a check reviews
	cause   string
	// The call, once requested and once answered.
	requested bool
	done      bool
	result    string
	err       string
	// answeredIn is the ID of the event that recorded the call's answer.
	answeredIn string
}

// teamEnd is how a team's task ends: an answer, or a failure with its reason.
type teamEnd struct {
	output, reason, msg, cause string
}

func (r *teamRun) want(w teamWant) {
	r.wants = append(r.wants, &w)
}

func (r *teamRun) record(cause, section, op, key, value, by string) {
	r.queue = append(r.queue, teamUpdate{u: messages.TeamStateUpdated{Section: section, Op: op, Key: key, Value: value, By: by}, cause: cause})
}

func (r *teamRun) finish(output, cause string) {
	if r.end == nil {
		r.end = &teamEnd{output: output, cause: cause}
	}
}

func (r *teamRun) failWith(reason, msg, cause string) {
	if r.end == nil {
		r.end = &teamEnd{reason: reason, msg: msg, cause: cause}
	}
}

// dispatch routes an orchestrator's task to member, recording why.
func (r *teamRun) dispatch(member, why, cause string) {
	r.record(cause, messages.TeamSectionGlobal, messages.TeamOpAppend, "routing", member+": "+why, teamBy)
	r.attempts = append(r.attempts, member)
	n := len(r.attempts)
	r.want(teamWant{id: "work-" + strconv.Itoa(n), member: member, purpose: "work", round: n, cause: cause})
}

// proposeRound asks every member of a debate for its proposal of round n.
func (r *teamRun) proposeRound(n int, cause string) {
	r.round = n
	for _, m := range r.team.cfg.Members {
		r.want(teamWant{id: fmt.Sprintf("propose-%d-%s", n, m.Name), member: m.Name, purpose: "propose", round: n, cause: cause})
	}
}

func (r *teamRun) fold(f fold, e messages.Envelope, p messages.Payload) {
	switch p := p.(type) {
	case *messages.TeamStateUpdated:
		// The team records its queue's head, and nothing else records these: the
		// event is the head's, as the log has it (the log's bytes win).
		if len(r.queue) > 0 {
			r.queue = r.queue[1:]
		}
		r.state.apply(*p)
	case *messages.ModelRequested:
		if p.Purpose == "route" {
			r.routeKey = p.Key
		}
	case *messages.ModelResponded:
		if r.needRoute && p.Key == r.routeKey {
			r.needRoute = false
			r.routed(p, f.t.rules, e.ID)
		}
	case *messages.ToolCallRequested:
		if p.Purpose == "" {
			return
		}
		for _, w := range r.wants {
			if w.id == p.CallID && !w.requested {
				w.requested = true
				if r.calls == nil {
					r.calls = map[string]*teamWant{}
				}
				r.calls[p.Key] = w
				r.sameMember(w, p, e.ID)
			}
		}
	case *messages.ToolCallCompleted:
		w := r.calls[p.Key]
		if w == nil || w.done {
			return
		}
		w.done, w.result, w.err = true, p.Result, p.Error
		r.answered(w, e.ID)
	}
}

// sameMember checks that the recorded delegate call p, which fold matched to w by
// its call ID, went to the member w names. It did, unless the team's configuration
// changed since the call was recorded (a node restarted with the member removed, the
// members reordered, another route or judge): w is then the recorded member, so
// that its answer is not taken for another's, and the task fails with
// unknown_agent, naming both, since the team it ran as is not the node's any more.
func (r *teamRun) sameMember(w *teamWant, p *messages.ToolCallRequested, cause string) {
	var args DelegateArgs
	if p.Tool != DelegateTool || json.Unmarshal([]byte(p.Arguments), &args) != nil || args.Agent == w.member {
		return
	}
	r.failWith(messages.ReasonUnknownAgent, fmt.Sprintf("the team changed since its task began: its call %s went to %q, and the team now gives it to %q (members: %s); "+
		"change a team only once its tasks have ended", p.CallID, args.Agent, w.member, r.team.memberList()), cause)
	w.member = args.Agent
}

// routed folds the answer of an orchestrator's routing call.
// A routing answer the model did not finish goes to the fallback from rules 4.
func (r *teamRun) routed(p *messages.ModelResponded, rules int, cause string) {
	fb := r.team.cfg.Fallback
	if p.Error != "" {
		r.dispatch(fb, "the fallback: the routing call failed: "+oneLine(p.Error), cause)
		return
	}
	if why := unwholeWork(rules, p); why != "" {
		r.dispatch(fb, fmt.Sprintf("the fallback: the model's routing answer is not whole (%s): %q", why, cut(oneLine(p.Message.Content), 200)), cause)
		return
	}
	var ans struct {
		Member string `json:"member"`
		Reason string `json:"reason"`
	}
	if err := teamJSON(rules, p.Message.Content, "member", &ans); err != nil {
		r.dispatch(fb, fmt.Sprintf("the fallback: the model's routing answer is no JSON object with a member (%s): %q", err, cut(oneLine(p.Message.Content), 200)), cause)
		return
	}
	member, ok := r.team.memberNamed(rules, ans.Member)
	if !ok {
		r.dispatch(fb, fmt.Sprintf("the fallback: the model chose %q, which is not a member (%s); its reason: %s",
			ans.Member, r.team.memberList(), cut(oneLine(ans.Reason), 200)), cause)
		return
	}
	r.dispatch(member, "the model's choice: "+cut(oneLine(ans.Reason), 300), cause)
}

// answered folds the answer of a hand-over: what it adds to the team's state, and
// what the team does next.
func (r *teamRun) answered(w *teamWant, cause string) {
	cfg := r.team.cfg
	switch w.purpose {
	case "check":
		r.checked(w, cause)
		return
	case "judge":
		r.judged(w, cause)
		return
	}
	w.answeredIn = cause
	if !r.answersInOrder(w) {
		r.recordAnswer(w, cause)
	}
	switch w.purpose {
	case "work":
		if w.err != "" {
			r.retry(w, "the member failed: "+oneLine(w.err), cause)
			return
		}
		switch c := cfg.Check; {
		case c.Critic != "":
			r.want(teamWant{id: "check-" + strconv.Itoa(w.round), member: c.Critic, purpose: "check", round: w.round, subject: w.member, cause: cause})
		case c.NonEmpty && strings.TrimSpace(w.result) == "":
			r.retry(w, "the answer is empty", cause)
		case c.re != nil && !c.re.MatchString(w.result):
			r.retry(w, fmt.Sprintf("the answer does not match %q", c.Regex), cause)
		default:
			r.finish(w.result, cause)
		}
	case "stage":
		if w.err != "" {
			r.failWith(messages.ReasonMemberFailed, fmt.Sprintf("stage %d (%s) failed: %s", w.round, w.member, w.err), cause)
		} else if w.round == len(cfg.Members) {
			r.finish(w.result, cause)
		} else {
			next := cfg.Members[w.round].Name
			r.want(teamWant{id: "stage-" + strconv.Itoa(w.round+1), member: next, purpose: "stage", round: w.round + 1, cause: cause})
		}
	case "branch":
		for _, o := range r.wants {
			if o.purpose == "branch" && !o.done {
				return
			}
		}
		r.recordAnswersOf(func(o *teamWant) bool { return o.purpose == "branch" })
		var answers []string
		ok := 0
		for _, o := range r.wants {
			if o.purpose != "branch" {
				continue
			}
			if o.err != "" {
				answers = append(answers, fmt.Sprintf("## %s (failed)\n%s", o.member, o.err))
			} else {
				ok++
				answers = append(answers, fmt.Sprintf("## %s\n%s", o.member, o.result))
			}
		}
		switch {
		case ok == 0:
			r.failWith(messages.ReasonMemberFailed, fmt.Sprintf("every branch failed (%s)", r.team.memberList()), cause)
		case cfg.Aggregator != "":
			r.want(teamWant{id: "aggregate", member: cfg.Aggregator, purpose: "aggregate", cause: cause})
		default:
			r.finish(strings.Join(answers, "\n\n"), cause)
		}
	case "aggregate":
		if w.err != "" {
			r.failWith(messages.ReasonMemberFailed, fmt.Sprintf("the aggregator %s failed: %s", w.member, w.err), cause)
		} else {
			r.finish(w.result, cause)
		}
	case "propose":
		ok := 0
		for _, o := range r.wants {
			if o.purpose == "propose" && o.round == w.round {
				if !o.done {
					return
				}
				if o.err == "" {
					ok++
				}
			}
		}
		r.recordAnswersOf(func(o *teamWant) bool { return o.purpose == "propose" && o.round == w.round })
		if ok == 0 {
			r.failWith(messages.ReasonMemberFailed, fmt.Sprintf("round %d: every proposer failed", w.round), cause)
			return
		}
		r.want(teamWant{id: "judge-" + strconv.Itoa(w.round), member: cfg.Judge, purpose: "judge", round: w.round, cause: cause})
	case "handoff":
		r.handedOff(w, cause)
	}
}

// answersInOrder reports whether w is the call of a member the team runs beside
// others (a fan-out's branch, a debate round's proposal) whose answer is recorded
// once all of theirs are in, in the team's order (recordAnswersOf): from decision
// rules 15 (rulesTeamAnswerOrder). So the state the next member is handed (the
// facts the members share under one key, in the order they were recorded) is
// the same whichever finished first, as is the prompt of its model; older rules
// recorded each answer as it came.
func (r *teamRun) answersInOrder(w *teamWant) bool {
	return r.rules >= rulesTeamAnswerOrder && (w.purpose == "branch" || w.purpose == "propose")
}

// recordAnswersOf records, in the team's order, the answers of the calls of, all
// of them answered, whose recording waited for the others' (answersInOrder), each
// caused by the event that recorded it.
func (r *teamRun) recordAnswersOf(of func(*teamWant) bool) {
	for _, o := range r.wants {
		if of(o) && r.answersInOrder(o) {
			r.recordAnswer(o, o.answeredIn)
		}
	}
}

// recordAnswer records a member's answer in its section, and the facts it shares
// (its STATE lines) in the global one.
func (r *teamRun) recordAnswer(w *teamWant, cause string) {
	if w.err != "" {
		r.record(cause, w.member, messages.TeamOpMerge, "answer", "(failed) "+w.err, w.member)
		return
	}
	r.record(cause, w.member, messages.TeamOpMerge, "answer", w.result, w.member)
	for _, m := range stateDirectives(r.rules, r.team.cfg.Pattern == TeamHandoff, w.result) {
		r.record(cause, messages.TeamSectionGlobal, messages.TeamOpMerge, m[1], strings.TrimSpace(m[2]), w.member)
	}
}

// stateDirectives returns the submatches of the "STATE: <key> = <value>" lines
// of a member's answer that set facts of the team's state (the key, the value),
// in their order. From decision rules 8 they are the lines that end the answer,
// where the member's brief asks for them: blank lines may stand among them, and
// in a handoff team the answer's last line may be its HANDOFF directive after
// them; a STATE line above the answer's last other line is text (a member
// quoting a document, a web page or a tool's output that holds such lines). Under
// older rules every STATE line of the answer was taken.
func stateDirectives(rules int, handoff bool, answer string) [][]string {
	if rules < rulesTeamState {
		return stateLine.FindAllStringSubmatch(answer, -1)
	}
	lines := strings.Split(answer, "\n")
	start, end, _ := closingLines(handoff, lines)
	var out [][]string
	for _, l := range lines[start:end] {
		if m := stateLine.FindStringSubmatch(l); m != nil {
			out = append(out, m)
		}
	}
	return out
}

// closingLines returns where, in a member's answer split at "\n", the lines that
// close it with directives are under decision rules 8: lines[start:end] are its
// closing STATE lines and the blank lines among and above them, and, in a
// handoff team whose answer's last line that is not blank is a HANDOFF line,
// that line is lines[end] (handsOff true); blank lines follow.
func closingLines(handoff bool, lines []string) (start, end int, handsOff bool) {
	end = len(lines)
	for end > 0 && strings.TrimSpace(lines[end-1]) == "" {
		end--
	}
	if handoff && end > 0 && handoffLine.MatchString(lines[end-1]) {
		end--
		handsOff = true
	}
	start = end
	for start > 0 && (strings.TrimSpace(lines[start-1]) == "" || stateLine.MatchString(lines[start-1])) {
		start--
	}
	return start, end, handsOff
}

// TeamDirectivesAt returns the byte offset in a team member's answer of the lines
// that close it with directives, as decision rules 8 read them: its closing STATE
// lines (blank lines among them: stateDirectives) and, after them, a last HANDOFF
// line (handoffDirective); len(answer) when it closes with neither. Any text, then
// a line that is neither blank nor a directive, then answer[TeamDirectivesAt(answer):]
// gives a team the facts and the handoff the whole answer gives it, whatever its
// pattern (a team that is no handoff team takes no STATE line above a last
// HANDOFF line, here as in the whole answer): a member's answer too long for a
// hand-over is cut in its middle so (package node's delegate calls).
func TeamDirectivesAt(answer string) int {
	lines := strings.Split(answer, "\n")
	start, end, handoff := closingLines(true, lines)
	for start < end && strings.TrimSpace(lines[start]) == "" {
		start++ // the blank lines above the first STATE line
	}
	if start == end && !handoff {
		return len(answer)
	}
	at := 0
	for _, l := range lines[:start] {
		at += len(l) + 1
	}
	return at
}

var (
	stateLine   = regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(llm.TeamStateLine) + `\s*([A-Za-z0-9_.-]{1,64})\s*=\s*(.*?)\s*$`)
	handoffLine = regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(llm.TeamHandoff) + `\s*([^\s:]+)\s*(?::\s*(.*?))?\s*$`)
)

// handoffDirective returns the submatches of a handoff member's answer's
// "HANDOFF: <member>: <note>" directive (the member, the note), or nil when it
// hands nothing over. From decision rules 7 the directive is the answer's last
// line that is not blank, where the member's brief asks for it: a HANDOFF line
// before it (a member quoting its brief, or an example) is text. Under older
// rules the first HANDOFF line anywhere in the answer was taken.
func handoffDirective(rules int, answer string) []string {
	if rules < rulesTeamPrompts {
		return handoffLine.FindStringSubmatch(answer)
	}
	last := strings.TrimRightFunc(answer, unicode.IsSpace)
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	return handoffLine.FindStringSubmatch(last)
}

// retry re-dispatches an orchestrator's task whose result failed its check (or
// whose member failed): to the fallback member if it has not had the task yet, else
// to the same member, with what failed; or fails the task when the team allows no
// more re-dispatches (check_failed, or member_failed when the last member failed).
func (r *teamRun) retry(w *teamWant, why, cause string) {
	cfg := r.team.cfg
	if len(r.attempts) > cfg.Redispatch && w.err != "" {
		r.failWith(messages.ReasonMemberFailed, fmt.Sprintf("%s failed: %s; after %d re-dispatches, the team gives up", w.member, w.err, cfg.Redispatch), cause)
		return
	}
	if len(r.attempts) > cfg.Redispatch {
		r.failWith(messages.ReasonCheckFailed, fmt.Sprintf("%s's answer failed the check (%s): %s; after %d re-dispatches, the team gives up",
			w.member, cfg.Check, why, cfg.Redispatch), cause)
		return
	}
	next := w.member
	if !slices.Contains(r.attempts, cfg.Fallback) {
		next = cfg.Fallback
	}
	r.record(cause, messages.TeamSectionGlobal, messages.TeamOpAppend, "redispatch", fmt.Sprintf("%s's answer failed the check: %s; to %s", w.member, why, next), teamBy)
	r.attempts = append(r.attempts, next)
	n := len(r.attempts)
	r.want(teamWant{id: "work-" + strconv.Itoa(n), member: next, purpose: "work", round: n,
		note: fmt.Sprintf("An earlier answer to this task, by %s, failed the team's check: %s. Do better.", w.member, why), cause: cause})
}

// checked folds a critic's review of an orchestrator's worker result.
func (r *teamRun) checked(c *teamWant, cause string) {
	var work *teamWant
	for _, w := range r.wants {
		if w.purpose == "work" && w.round == c.round {
			work = w
		}
	}
	verdict := strings.TrimSpace(c.result)
	if c.err != "" {
		verdict = "FAIL: the critic failed: " + oneLine(c.err)
	}
	r.record(cause, messages.TeamSectionGlobal, messages.TeamOpAppend, "checks", fmt.Sprintf("%s's answer: %s", work.member, cut(oneLine(verdict), 300)), c.member)
	if criticPasses(r.rules, verdict) {
		r.finish(work.result, cause)
		return
	}
	why := strings.TrimSpace(strings.TrimLeft(strings.TrimPrefix(strings.TrimPrefix(verdict, "FAIL"), "fail"), ":"))
	r.retry(work, fmt.Sprintf("the critic %s says: %s", c.member, cut(oneLine(why), 500)), cause)
}

// criticPasses reports whether a critic's reply passes the answer it checked. From
// rules 4 its first word is PASS, in any case and after any markup ("**Pass**:",
// "PASS."); under older rules the reply started with the letters PASS, so that
// "Passing over the details: FAIL, the sum is wrong" passed, and "**PASS**" did not.
func criticPasses(rules int, verdict string) bool {
	if rules < rulesWhole {
		return strings.HasPrefix(strings.ToUpper(verdict), "PASS")
	}
	word := strings.TrimLeftFunc(verdict, func(c rune) bool { return !unicode.IsLetter(c) && !unicode.IsDigit(c) })
	if i := strings.IndexFunc(word, func(c rune) bool { return !unicode.IsLetter(c) && !unicode.IsDigit(c) }); i >= 0 {
		word = word[:i]
	}
	return strings.EqualFold(word, "PASS")
}

// judged folds a debate judge's verdict.
func (r *teamRun) judged(j *teamWant, cause string) {
	cfg := r.team.cfg
	if j.err != "" {
		r.failWith(messages.ReasonMemberFailed, fmt.Sprintf("the judge %s failed in round %d: %s", j.member, j.round, j.err), cause)
		return
	}
	var v struct {
		Verdict  string `json:"verdict"`
		Winner   string `json:"winner"`
		Feedback string `json:"feedback"`
		Reason   string `json:"reason"`
	}
	err := teamJSON(r.rules, j.result, "verdict", &v)
	v.Winner, _ = r.team.memberNamed(r.rules, v.Winner)
	proposals := map[string]*teamWant{}
	for _, w := range r.wants {
		if w.purpose == "propose" && w.round == j.round && w.err == "" {
			proposals[w.member] = w
		}
	}
	var verdict string
	switch {
	case err != nil:
		verdict = fmt.Sprintf("round %d: no verdict (%s): %q", j.round, err, cut(oneLine(j.result), 200))
	case strings.EqualFold(v.Verdict, "accept") && proposals[v.Winner] != nil:
		r.record(cause, messages.TeamSectionGlobal, messages.TeamOpAppend, "verdicts",
			fmt.Sprintf("round %d: accept %s: %s", j.round, v.Winner, cut(oneLine(cmp.Or(v.Reason, v.Feedback)), 300)), j.member)
		r.finish(proposals[v.Winner].result, cause)
		return
	case strings.EqualFold(v.Verdict, "accept"):
		verdict = fmt.Sprintf("round %d: accept %q, which is no proposer of this round", j.round, v.Winner)
	default:
		verdict = fmt.Sprintf("round %d: revise: %s", j.round, cut(oneLine(cmp.Or(v.Feedback, v.Reason)), 500))
	}
	r.record(cause, messages.TeamSectionGlobal, messages.TeamOpAppend, "verdicts", verdict, j.member)
	if j.round >= cfg.Rounds {
		r.failWith(messages.ReasonNoVerdict, fmt.Sprintf("the judge %s accepted no proposal in %d rounds; last verdict: %s", j.member, cfg.Rounds, verdict), cause)
		return
	}
	r.proposeRound(j.round+1, cause)
	for _, w := range r.wants {
		if w.purpose == "propose" && w.round == j.round+1 {
			w.note = verdict
		}
	}
}

// handedOff folds a handoff member's answer: the task's answer, or a hand-over to a
// peer, or the end of a chain that would go round or on too long.
func (r *teamRun) handedOff(w *teamWant, cause string) {
	cfg := r.team.cfg
	if w.err != "" {
		r.failWith(messages.ReasonMemberFailed, fmt.Sprintf("%s failed: %s (chain: %s)", w.member, w.err, strings.Join(r.chain, " → ")), cause)
		return
	}
	m := handoffDirective(r.rules, w.result)
	if m == nil {
		r.finish(w.result, cause)
		return
	}
	to, note := m[1], m[2]
	to, isMember := r.team.memberNamed(r.rules, to)
	path := strings.Join(append(slices.Clone(r.chain), to), " → ")
	switch {
	case !isMember:
		r.failWith(messages.ReasonMemberFailed, fmt.Sprintf("%s handed the conversation to %q, which is not a member of the team (%s)", w.member, to, r.team.memberList()), cause)
	case slices.Contains(r.chain, to):
		r.failWith(messages.ReasonHandoffCycle, fmt.Sprintf("handoff cycle: %s: %s handed the conversation back to %s, who had it already; the chain ends here", path, w.member, to), cause)
	case len(r.chain) > cfg.MaxHandoffs:
		r.failWith(messages.ReasonMaxHandoffs, fmt.Sprintf("%s handed the conversation on after %d handoffs, the team's max_handoffs: %s", w.member, cfg.MaxHandoffs, path), cause)
	default:
		r.record(cause, messages.TeamSectionGlobal, messages.TeamOpAppend, "handoffs", fmt.Sprintf("%s → %s: %s", w.member, to, cut(oneLine(note), 300)), w.member)
		r.chain = append(r.chain, to)
		if r.rules >= rulesHandoffNote {
			note = cut(note, MaxHandoffNote)
		}
		r.want(teamWant{id: "handoff-" + strconv.Itoa(len(r.chain)), member: to, purpose: "handoff", round: len(r.chain),
			note: fmt.Sprintf("%s handed the conversation to you: %s", w.member, note), cause: cause})
	}
}

func (r *teamRun) decide(v *view) *Decision {
	// What begin decided has no cause yet: the task itself is.
	cause := func(c string) string { return cmp.Or(c, v.t.ID) }
	if len(r.queue) > 0 {
		u := r.queue[0].u
		return &Decision{Payload: &u, CausationID: cause(r.queue[0].cause), TaskID: v.t.ID}
	}
	if e := r.end; e != nil {
		if e.reason != "" {
			// Under rules 3, a team whose budget is spent when its pattern ends
			// it failed (a member whose share ran out, and no member left to hand
			// the work to) ends as an agent's task does, with the budget's
			// reason: the member's failure is in the team's state and the
			// delegate call's result. An answer is kept, as an agent's is.
			if v.t.rules >= rulesTeamBudget {
				if f := v.a.overBudget(v.t); f != nil {
					return &Decision{Payload: f, CausationID: cause(e.cause), TaskID: v.t.ID}
				}
			}
			return v.fail(e.reason, e.msg, cause(e.cause))
		}
		return v.complete(e.output, cause(e.cause))
	}
	for _, w := range r.wants {
		if !w.requested {
			// Under rules 3, a team whose budget is spent starts no member: the
			// task ends as an agent's does (under 1 and 2 the member started
			// failed at once, its delegate call refused, and the pattern went on).
			if v.t.rules >= rulesTeamBudget {
				if f := v.a.overBudget(v.t); f != nil {
					return &Decision{Payload: f, CausationID: cause(w.cause), TaskID: v.t.ID}
				}
			}
			return v.call(w.purpose, w.id, DelegateTool, r.handOverArgs(v, w), cause(w.cause))
		}
	}
	if r.needRoute && r.routeKey == "" {
		return v.model("route", v.t.ID)
	}
	return nil
}

// prompt builds the request of a team's model call: the routing prompt.
func (r *teamRun) prompt(v *view, purpose string) llm.Request {
	cfg := r.team.cfg
	var b strings.Builder
	fmt.Fprintf(&b, "Choose the member of team %q who should do the task below.\n\nMembers:\n", v.a.Name)
	for _, m := range cfg.Members {
		b.WriteString(memberLine(m))
	}
	fmt.Fprintf(&b, "If none fits, choose %q.\n\n", cfg.Fallback)
	if s := r.state.render(cfg.Members, r.rules); s != "" {
		b.WriteString(s + "\n\n")
	}
	b.WriteString("Task:\n" + r.input + "\n\n" + llm.TeamRouteAsk)
	return llm.Request{Messages: []messages.ChatMessage{
		v.systemMessage(fmt.Sprintf("You route the tasks of team %q to its members.", v.a.Name)),
		{Role: messages.RoleUser, Content: b.String()},
	}}
}

// memberLine describes a member: "- name: description (tools: a, b)".
func memberLine(m TeamMember) string {
	tools := "none"
	if len(m.Tools) > 0 {
		tools = strings.Join(m.Tools, ", ")
	}
	desc := strings.Join(strings.Fields(m.Description), " ")
	if desc == "" {
		desc = "(no description)"
	}
	return fmt.Sprintf("- %s: %s (tools: %s)\n", m.Name, desc, tools)
}

// taskText is the task a member is handed: the team's task, then the team brief (its
// role, the team's state, the protocol it may use). It is built from folded state
// only, so a refold or a replay builds the same bytes.
func (r *teamRun) taskText(v *view, w *teamWant) string {
	return r.taskTextOf(v, w, r.input, r.state.render(r.team.cfg.Members, r.rules))
}

// taskTextOf is taskText of the team's task input and its state rendered as
// state ("": none).
func (r *teamRun) taskTextOf(v *view, w *teamWant, input, state string) string {
	cfg := r.team.cfg
	var b strings.Builder
	b.WriteString(input)
	b.WriteString(llm.TeamBrief)
	fmt.Fprintf(&b, "You are %q, working for team %q (pattern %s). ", w.member, v.a.Name, cfg.Pattern)
	switch w.purpose {
	case "work":
		b.WriteString("The team routed the task above to you: do it, and answer with the result.")
	case "stage":
		fmt.Fprintf(&b, "You are stage %d of %d.", w.round, len(cfg.Members))
		if w.round > 1 {
			fmt.Fprintf(&b, " Build on the answer of %q in the team state.", cfg.Members[w.round-2].Name)
		}
	case "branch":
		b.WriteString("Several members work on the task above at once: answer it yourself.")
	case "aggregate":
		fmt.Fprintf(&b, "Combine the answers of %s in the team state into one answer to the task above.", quotedNames(cfg.Members))
	case "propose":
		fmt.Fprintf(&b, "Propose your answer to the task above (round %d of %d); a judge picks among the proposals.", w.round, cfg.Rounds)
	case "handoff":
		fmt.Fprintf(&b, "Answer the task above yourself, or hand the conversation to a peer better placed to: end your answer with the line\n%s <member>: <note for them>\nPeers:\n", llm.TeamHandoff)
		for _, m := range cfg.Members {
			if m.Name != w.member {
				b.WriteString(memberLine(m))
			}
		}
		b.WriteString("Each member may have the conversation once.")
	case "check":
		fmt.Fprintf(&b, "Check the answer of %q to the task above (its answer is in the team state). Reply PASS if it is right and complete, else FAIL: and what is wrong.", w.subject)
	case "judge":
		fmt.Fprintf(&b, "Judge the proposals of %s (their answers in the team state) for round %d of %d.", quotedNames(cfg.Members), w.round, cfg.Rounds)
		if w.round >= cfg.Rounds {
			b.WriteString(" This is the last round: accept the best proposal.")
		}
		b.WriteString("\n" + llm.TeamJudgeAsk)
	}
	if w.note != "" {
		b.WriteString("\nNote: " + w.note)
	}
	switch {
	case w.purpose == "judge" || w.purpose == "check":
	case r.rules < rulesTeamState:
		fmt.Fprintf(&b, "\nTo share a fact with the team, add a line: %s <key> = <value>", llm.TeamStateLine)
	case r.team.cfg.Pattern == TeamHandoff:
		fmt.Fprintf(&b, "\nTo share facts with the team, end your answer with a line for each: %s <key> = <value> (the HANDOFF line, if any, after them); a %s line elsewhere is not read", llm.TeamStateLine, llm.TeamStateLine)
	default:
		fmt.Fprintf(&b, "\nTo share facts with the team, end your answer with a line for each: %s <key> = <value>; a %s line elsewhere is not read", llm.TeamStateLine, llm.TeamStateLine)
	}
	if state != "" {
		b.WriteString("\n\n" + state)
	}
	return b.String()
}

func quotedNames(ms []TeamMember) string {
	q := make([]string, len(ms))
	for i, m := range ms {
		q[i] = strconv.Quote(m.Name)
	}
	return strings.Join(q, ", ")
}

// teamState is the fold of a team task's state updates: sections (global, and one
// per member) of keys, each key with its values in order, each value with its writer.
type teamState map[string]map[string][]teamValue

type teamValue struct{ value, by string }

// apply folds one update: append adds the value after the key's; merge replaces the
// values the same writer wrote to the key (at the first one's place), keeping every
// other writer's. An unknown op is folded as an append: nothing is ever lost.
func (s teamState) apply(u messages.TeamStateUpdated) {
	sec := s[u.Section]
	if sec == nil {
		sec = map[string][]teamValue{}
		s[u.Section] = sec
	}
	vals := sec[u.Key]
	nv := teamValue{value: u.Value, by: u.By}
	if u.Op == messages.TeamOpMerge {
		if i := slices.IndexFunc(vals, func(x teamValue) bool { return x.by == u.By }); i >= 0 {
			kept := append(slices.Clone(vals[:i]), nv)
			for _, x := range vals[i+1:] {
				if x.by != u.By {
					kept = append(kept, x)
				}
			}
			sec[u.Key] = kept
			return
		}
	}
	sec[u.Key] = append(vals, nv)
}

// render writes the state for a prompt under decision rules rules: the global
// section, then the members' in the team's order, then any other, sorted; keys
// sorted; values in order, each with its writer (teamValueText). An empty state
// renders as "".
func (s teamState) render(members []TeamMember, rules int) string {
	return s.renderWithin(members, rules, TeamHandOverBytes)
}

// renderWithin is render with each value cut past valueBytes (from decision
// rules 7: teamValueWithin).
func (s teamState) renderWithin(members []TeamMember, rules, valueBytes int) string {
	if len(s) == 0 {
		return ""
	}
	var order []string
	if _, ok := s[messages.TeamSectionGlobal]; ok {
		order = append(order, messages.TeamSectionGlobal)
	}
	for _, m := range members {
		if _, ok := s[m.Name]; ok {
			order = append(order, m.Name)
		}
	}
	var rest []string
	for name := range s {
		if !slices.Contains(order, name) {
			rest = append(rest, name)
		}
	}
	slices.Sort(rest)
	order = append(order, rest...)
	var b strings.Builder
	b.WriteString("<team_state>\n")
	for _, name := range order {
		if name == messages.TeamSectionGlobal {
			b.WriteString("<global>\n")
		} else {
			fmt.Fprintf(&b, "<member name=%q>\n", name)
		}
		sec := s[name]
		keys := make([]string, 0, len(sec))
		for k := range sec {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			for _, v := range sec[k] {
				fmt.Fprintf(&b, "<%s by=%q>%s</%s>\n", k, v.by, teamValueWithin(rules, v.value, valueBytes), k)
			}
		}
		if name == messages.TeamSectionGlobal {
			b.WriteString("</global>\n")
		} else {
			b.WriteString("</member>\n")
		}
	}
	b.WriteString("</team_state>")
	return b.String()
}

// teamValueText is a value of the team's state as render writes it between its
// key's tags. From decision rules 7 it is whole up to TeamHandOverBytes (a longer
// one cut with a note saying how much, and that the whole is in the team's
// recorded state), its "&", "<" and ">" escaped as "&amp;", "&lt;" and "&gt;", so
// that a value (a member's answer) cannot close its section nor pose as another
// ("</member><member name=…>"). Under older rules it was cut at teamValueCut and
// written as it is.
func teamValueText(rules int, value string) string {
	return teamValueWithin(rules, value, TeamHandOverBytes)
}

// teamValueWithin is teamValueText with the value cut past n bytes (from rules 7;
// a hand-over bounded by MaxHandOverArguments cuts them shorter: handOverArgs).
func teamValueWithin(rules int, value string, n int) string {
	if rules < rulesTeamPrompts {
		return cut(value, teamValueCut)
	}
	if len(value) <= n {
		return teamValueEscaper.Replace(value)
	}
	for n > 0 && value[n]&0xC0 == 0x80 {
		n--
	}
	return teamValueEscaper.Replace(value[:n]) +
		fmt.Sprintf(" […%d bytes cut: the whole value is in the team's recorded state, its session's team.state_updated event]", len(value)-n)
}

// teamValueEscaper escapes what would read as markup in a value of the team's state.
var teamValueEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// teamJSON decodes into v the JSON object a routing answer or a judge's verdict
// holds (a model may wrap it in prose or a code fence), field the key it is read
// for ("member", "verdict"). From rules 15 (rulesJSONBody) it is the object
// jsonBody finds, as a critic's verdict is: the first holding field that is a
// fence's whole content, or that starts at the answer's first '{', or ends at its
// last '}', so braces in the prose before it (set notation, a proposal's code the
// judge quotes) are not taken for it. Older rules read the text from the first '{'.
func teamJSON(rules int, s, field string, v any) error {
	if rules >= rulesJSONBody {
		body := jsonBody(rules, s, field)
		if body == "" {
			return errors.New("no JSON object")
		}
		return json.NewDecoder(strings.NewReader(body)).Decode(v)
	}
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return errors.New("no JSON object")
	}
	return json.NewDecoder(strings.NewReader(s[i:])).Decode(v)
}

// cut returns s, or its first n bytes (on a character boundary) and a note.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + fmt.Sprintf(" […%d bytes cut]", len(s)-n)
}

// oneLine folds s's white space into single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
