package node

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// Sub-agents are child sessions. A node that runs named agents (Config.Agents) has
// the delegate tool: an agent calls delegate(agent, task), and the call's performer
// submits the task, through the node's ingress like any task, to a session of its
// own, the child: its session ID and the task's message ID are derived from the
// call's idempotency key (ChildSessionID), so a call performed again (after a
// restart, a hand-over, a retry) submits the same task, which the child records
// once, and waits for the same child instead of starting a second one. The child's
// task records its parent (messages.TaskSubmitted.Parent); it runs the named agent
// with a clean context (only the task) and that agent's own limits, routed by its
// own key like any session (in a cluster, to the owner of its partition). Its final
// answer, cut to MaxDelegateResult (MaxTeamMemberResult for a team's hand-over, in
// its middle: answerBound), is the call's result; a child that fails, for whatever
// reason, is the call's error, with the reason and the child's session ID.
// Cancelling the call (the parent's task is cancelled, or runs out of time) cancels
// the child's task (delegateCalls), however far the call's performance got: one
// cancelled as it starts still cancels the child an earlier performance started.
// A failed task also cancels the children of the delegate calls it recorded and got
// no answer to, performed or not in this incarnation (parentEnds, delegateends.go).

// DelegateTool is the name of the tool an agent delegates a task to a sub-agent with
// (a team hands its members their work with it: actors.DelegateTool).
const DelegateTool = actors.DelegateTool

// Bounds of delegation.
const (
	// MaxDelegationDepth bounds the nesting of sub-agents: a child of a session that
	// is no child is 1 deep, its own child 2, and a session MaxDelegationDepth deep
	// cannot delegate (the call is an error). A fork of a child session is no
	// child, and as deep as that child (TaskDepth).
	MaxDelegationDepth = actors.MaxDelegationDepth
	// MaxDelegateResult bounds, in bytes, the answer a delegate call returns: a
	// longer one is cut, with a note that says so and names the child session.
	MaxDelegateResult = actors.MaxDelegateResult
	// MaxTeamMemberResult bounds, in bytes, the answer of a team's member (a
	// delegate call a team makes): its answer is the team's work, and the team's
	// own answer when it is the last, so only one past any model's output is cut,
	// and in its middle: the lines that close it with directives for the team
	// (its STATE lines, a HANDOFF line) are kept (cutMemberAnswer).
	MaxTeamMemberResult = actors.TeamHandOverBytes
	// DefaultMaxSubAgents is how many sub-agents (child sessions: its delegate
	// calls, a team's hand-overs) a task may start itself when its agent sets no
	// bound of its own (NamedAgent.MaxSubAgents, Config.MaxSubAgents): a call past
	// it is an error result, and no child starts. With MaxDelegationDepth it bounds
	// the sessions one task can start in all.
	DefaultMaxSubAgents = 64
	// MaxSubAgentsBound bounds an agent's own MaxSubAgents.
	MaxSubAgentsBound = 1000
	// DelegateTimeout bounds a child's task: its deadline is this long after the
	// delegate call was first performed, or the parent task's deadline when that
	// comes first.
	DelegateTimeout = 30 * time.Minute
)

// delegateGrace is how much longer than DelegateTimeout a delegate call may
// wait: the child fails at its deadline, and the call answers with that.
const delegateGrace = time.Minute

// delegateConcurrency is the node's bound on the delegate calls running at once:
// none in effect. A call only waits for its child, and any bound deadlocks: the
// calls of the parents waiting for their children take every slot, and the
// children's own delegate calls wait for one behind them, until the calls' 31
// minutes pass (1030 tasks of an agent whose sub-agents delegate in turn took all
// of 4096 slots: TestNestedDelegationDoesNotWaitForSlots). What bounds the calls
// waiting is the sessions': each runs at most MaxParallelTools tool calls at once.
// A variable only so that a test can take every slot.
var delegateConcurrency = math.MaxInt32

// delegateArgs are the arguments of a delegate call.
type delegateArgs = actors.DelegateArgs

// ChildSessionID is the session ID of the child a delegate call with idempotency key
// key starts: "<parent session>.sub<seq of the call>", or, when that is longer than a
// session ID may be (SessionIDRule), "sub." and a hash of the key. A call performed
// again finds the same child.
func ChildSessionID(key messages.EffectKey) string {
	id := key.SessionID + ".sub" + strconv.FormatUint(key.Seq, 10)
	if ValidSessionID(id) {
		return id
	}
	sum := sha256.Sum256([]byte(key.String()))
	return "sub." + hex.EncodeToString(sum[:16])
}

// TaskDepth is how deep a sub-agent the session of task t is (actors.TaskDepth):
// its parent's depth on a child's task, else the depth it keeps
// (messages.TaskSubmitted.Depth), each read within its range. A delegate call
// of t starts a child TaskDepth(t)+1 deep.
func TaskDepth(t *messages.TaskSubmitted) int { return actors.TaskDepth(t) }

// childTaskID is the message ID (and so the event ID) of the task a delegate call
// with idempotency key key submits to its child: its session records it once.
func childTaskID(key messages.EffectKey) string {
	return key.String() + "/delegate"
}

// delegateTool returns the delegate tool of a node that runs agents, whose calls n
// performs (delegateCalls). Its schema names the agents in an enum, and its
// description says what each does (actors.NewDelegateTool): both follow the roster
// alone, so a node and replay verification (with no node: n nil, and a call
// fails) offer the same bytes, and a task recorded under decision rules 10 or
// later renders them from the roster it recorded (Config.roster).
func delegateTool(roster []messages.RosterAgent, n *Node) (tools.Tool, error) {
	perform := func(context.Context, delegateArgs) (string, error) {
		return "", errors.New("delegate: sub-agents run on a node; this configuration is not one")
	}
	if n != nil {
		perform = n.delegate
	}
	t, err := actors.NewDelegateTool(roster, perform,
		tools.WithTimeout(DelegateTimeout+delegateGrace),
		tools.WithConcurrency(delegateConcurrency),
		tools.WithMaxOutput(MaxTeamMemberResult+4<<10),
		tools.WithModelUsage(),
	)
	if err != nil || n == nil {
		return t, err
	}
	return delegateCalls{FuncTool: t, n: n}, nil
}

// delegateCalls is a node's delegate tool: its function performs a call
// (Node.delegate), and a call that ends because the parent cancelled it
// (actors.ErrEffectCancelled: its task was cancelled, or ran past its deadline)
// cancels the child's task, however far the function got. A call is cancelled as
// soon as its task ends, and may be before its function reached the child, or
// before the function ran at all (a tools.FuncTool does not call a function whose
// context ended): a parent that resumes on another node (its node died or stopped)
// and whose task is cancelled at once performs its calls again, and their children,
// which the calls' earlier performances started, are still running.
type delegateCalls struct {
	*tools.FuncTool
	n *Node
}

// Call implements tools.Tool.
func (d delegateCalls) Call(ctx context.Context, c tools.Call) (string, error) {
	out, err := d.FuncTool.Call(ctx, c)
	if err != nil && errors.Is(context.Cause(ctx), actors.ErrEffectCancelled) {
		if key, kerr := messages.ParseEffectKey(c.Key); kerr == nil {
			d.n.cancelChild(context.Background(), ChildSessionID(key))
		}
	}
	return out, err
}

// withDelegate returns ts and, when the configuration runs named agents, the
// delegate tool whose calls n performs (nil: a tool that only describes itself).
func (c Config) withDelegate(ts []tools.Tool, n *Node) ([]tools.Tool, error) {
	if len(c.Agents) == 0 {
		return ts, nil
	}
	if slices.ContainsFunc(ts, func(t tools.Tool) bool { return t.Spec().Name == DelegateTool }) {
		return nil, fmt.Errorf("node: a tool is named %q, the name of the node's own tool for sub-agents (it has named agents): rename it", DelegateTool)
	}
	d, err := delegateTool(c.roster(), n)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return append(slices.Clone(ts), d), nil
}

// roster returns the node's agents as the delegate tool and a planner describe
// them (actors.Agent.Roster): their names and descriptions, in Agents' order.
func (c Config) roster() []messages.RosterAgent {
	if len(c.Agents) == 0 {
		return nil
	}
	out := make([]messages.RosterAgent, len(c.Agents))
	for i, a := range c.Agents {
		out[i] = messages.RosterAgent{Name: a.Name, Description: a.Description}
	}
	return out
}

// addDelegate gives the node the delegate tool when it runs named agents.
func (n *Node) addDelegate() error {
	ts, err := n.cfg.withDelegate(n.cfg.Tools, n)
	if err != nil {
		return err
	}
	n.cfg.Tools = ts
	return nil
}

// delegate performs a delegate call: it submits the child's task (once per call,
// whatever the number of times the call is performed) and waits for its end.
func (n *Node) delegate(ctx context.Context, a delegateArgs) (string, error) {
	key, err := messages.ParseEffectKey(tools.CallKey(ctx))
	if err != nil {
		return "", fmt.Errorf("delegate: the call has no key of a session's call: %w", err)
	}
	parent, parentEvents, err := n.parentTask(ctx, key)
	if err != nil {
		return "", err
	}
	depth := TaskDepth(parent) + 1
	if depth > MaxDelegationDepth {
		return "", fmt.Errorf("delegate: sub-agents nest at most %d deep, and this session is a sub-agent %d deep: do the task yourself",
			MaxDelegationDepth, depth-1)
	}
	if err := n.checkSubAgents(parentEvents, key, parent.Agent); err != nil {
		return "", err
	}
	childID, taskID := ChildSessionID(key), childTaskID(key)
	if err := n.checkChildSession(ctx, childID, taskID); err != nil {
		return "", err
	}
	deadline := n.cfg.Clock.Now().Add(DelegateTimeout).UnixMicro()
	if parent.DeadlineUS > 0 {
		deadline = min(deadline, parent.DeadlineUS)
	}
	budget, err := n.childBudget(parentEvents, key, parent, a.Agent)
	if err != nil {
		return "", err
	}
	env, err := n.ingress.admitChild(Task{Input: a.Task, SessionID: childID, Agent: a.Agent, MaxTokens: budget.tokens, MaxCostUSD: budget.usd}, taskID,
		child{parent: messages.ParentRef{SessionID: key.SessionID, Key: key.String(), Depth: depth}, deadlineUS: deadline})
	if err != nil {
		return "", fmt.Errorf("delegate: %w", err)
	}
	// Watch before submitting: the child's end cannot pass unseen.
	live, stop := n.Watch(childID)
	defer stop()
	if err := n.submitChild(ctx, env); err != nil {
		return "", err
	}
	return n.awaitChild(ctx, a.Agent, childID, taskID, n.resultBound(parent.Agent), live)
}

// checkChildSession refuses a delegate call whose child session childID holds
// tasks already and not the call's own (taskID): a client named a session of its
// own after the child (POST /v1/tasks with session_id "boss.sub4"), and the
// sub-agent would work in that conversation, not with the clean context its task
// alone gives it (its answer the client's to steer). A child that recorded the
// call's task (the call is performed again) is the call's. A log that cannot be
// read leaves the call to go on, as before (awaitChild reads it again).
func (n *Node) checkChildSession(ctx context.Context, childID, taskID string) error {
	events, err := n.log.Read(ctx, childID, 1)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		n.cfg.Logger.Warn("delegate: read the child session before starting it", "session", childID, "err", err)
		return nil
	}
	other := ""
	for _, e := range events {
		if e.Type != messages.TypeTaskSubmitted {
			continue
		}
		if e.ID == taskID {
			return nil
		}
		other = cmp.Or(other, e.ID)
	}
	if other != "" {
		return fmt.Errorf("delegate: session %s, where this call's sub-agent would work, holds another task already (%s, not this call's): "+
			"no sub-agent starts in another conversation; do the task yourself", childID, QuoteHead(other))
	}
	return nil
}

// answerBound is how much of a child's answer a delegate call returns, and how it
// is cut past that (answerBound.cut).
type answerBound struct {
	// bytes bounds the result.
	bytes int
	// team is set for a team's hand-over: a longer answer keeps the lines that
	// close it with directives for the team (cutMemberAnswer).
	team bool
}

// resultBound is how much of a child's answer a delegate call made for agent
// returns: MaxTeamMemberResult for a team's hand-over, MaxDelegateResult for an
// agent's own call (its answer goes into that agent's conversation).
func (n *Node) resultBound(agent string) answerBound {
	for _, a := range n.cfg.Agents {
		if a.Name == agent && a.Team != nil {
			return answerBound{bytes: MaxTeamMemberResult, team: true}
		}
	}
	return answerBound{bytes: MaxDelegateResult}
}

// cut returns the child's answer out as the delegate call's result: whole up to
// b.bytes, else cut to at most b.bytes with a note naming child session childID,
// which holds it whole: a team's member's answer in its middle when it closes
// with directives for the team (cutMemberAnswer), any other one at its end
// (cutResult).
func (b answerBound) cut(out, childID string) string {
	if b.team {
		if s, ok := cutMemberAnswer(out, childID, b.bytes); ok {
			return s
		}
	}
	return cutResult(out, childID, b.bytes)
}

// submitChild submits a child's task, trying again a few times (with the same
// message ID: it is recorded once) while the bus or the session refuses it for a
// reason that may pass. A node that is stopping answers nothing: the call ends with
// its context (the node's effects close), unrecorded, and is performed again when
// the parent resumes. A call whose context ended returns its cause (a call its
// parent cancelled cancels the child as it returns: delegateCalls).
func (n *Node) submitChild(ctx context.Context, env messages.Envelope) error {
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		_, err := n.submit(ctx, env)
		if err == nil {
			return nil
		}
		select {
		case <-n.stopping:
			<-ctx.Done()
			return context.Cause(ctx)
		default:
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if errors.Is(err, ErrBadTask) || attempt == 6 {
			return fmt.Errorf("delegate: start child session %s: %w", env.SessionID, err)
		}
		n.cfg.Logger.Warn("delegate: start the child session; trying again", "session", env.SessionID, "attempt", attempt, "err", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		backoff *= 2
	}
}

// parentTask returns the task of the parent session that made the delegate call
// keyed key (the task.submitted the call's request event belongs to), and the
// parent's events: from that task.submitted on (parentEvents).
func (n *Node) parentTask(ctx context.Context, key messages.EffectKey) (*messages.TaskSubmitted, []messages.Envelope, error) {
	events, err := n.parentEvents(ctx, key)
	if err != nil {
		return nil, nil, fmt.Errorf("delegate: read the parent session %s: %w", key.SessionID, err)
	}
	task := ""
	for _, e := range events {
		if e.Seq == key.Seq && e.Type == messages.TypeToolCallRequested {
			task = e.CorrelationID
		}
	}
	for _, e := range events {
		if task == "" || e.ID != task || e.Type != messages.TypeTaskSubmitted {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			return nil, nil, fmt.Errorf("delegate: the parent's task: %w", err)
		}
		return p.(*messages.TaskSubmitted), events, nil
	}
	return nil, nil, fmt.Errorf("delegate: call %s is no tool call of a session's task: a sub-agent is delegated to by an agent, not called directly", key)
}

// parentEvents returns the parent session's events from the task.submitted of
// the task that requested the delegate call keyed key on, when its kept fold
// (statusFolds, which folds only the events since the node's last read of the
// session) says that task runs and the log holds the call's request of it there;
// else its whole history. The events of a task come after its task.submitted, and
// parentTask, checkSubAgents and childBudget read only the call's task's: their
// answers are the whole history's, and a delegate call of a long session reads
// its task's events, not every task's before it.
func (n *Node) parentEvents(ctx context.Context, key messages.EffectKey) ([]messages.Envelope, error) {
	var (
		task string
		from uint64
	)
	_, err := n.folds.with(ctx, n.log, key.SessionID, func(st *actors.SessionState) error {
		task = st.Active()
		from, _ = st.TaskSeq(task)
		return nil
	})
	if err == nil && from > 1 && key.Seq >= from {
		events, err := n.log.Read(ctx, key.SessionID, from)
		if err != nil {
			return nil, err
		}
		if at := key.Seq - from; at < uint64(len(events)) && events[0].Seq == from && events[0].ID == task &&
			events[0].Type == messages.TypeTaskSubmitted && events[at].Seq == key.Seq && events[at].CorrelationID == task {
			return events, nil
		}
	}
	return n.log.Read(ctx, key.SessionID, 1)
}

// checkSubAgents refuses the delegate call keyed key when the parent's task
// (agent's) has started as many sub-agents as it may (maxSubAgents): the calls it
// requested up to this one, in seq order (one reply's together), are counted from
// the parent's events, so a call performed again decides the same.
func (n *Node) checkSubAgents(events []messages.Envelope, key messages.EffectKey, agent string) error {
	limit, task := n.maxSubAgents(agent), ""
	for _, e := range events {
		if e.Seq == key.Seq {
			task = e.CorrelationID
		}
	}
	calls := 0
	for _, e := range events {
		if e.Seq > key.Seq || e.CorrelationID != task || e.Type != messages.TypeToolCallRequested {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			return fmt.Errorf("delegate: the parent's event %d: %w", e.Seq, err)
		}
		if p.(*messages.ToolCallRequested).Tool == DelegateTool {
			calls++
		}
	}
	if calls > limit {
		return fmt.Errorf("delegate: this task has started %d sub-agents, the most a task of agent %q may (max_subagents): no sub-agent starts; "+
			"do the rest yourself, with the answers you have", limit, cmp.Or(agent, "(default)"))
	}
	return nil
}

// maxSubAgents is how many sub-agents a task of agent may start itself: its own
// bound, else the node's (Config.MaxSubAgents), else DefaultMaxSubAgents; a team
// without its own may always make the hand-overs its pattern needs
// (actors.Team.HandOvers: a debate of many members and rounds).
func (n *Node) maxSubAgents(agent string) int {
	def := cmp.Or(n.cfg.MaxSubAgents, DefaultMaxSubAgents)
	for _, a := range n.cfg.Agents {
		switch {
		case a.Name != agent:
		case a.MaxSubAgents > 0:
			return a.MaxSubAgents
		case a.Team != nil:
			return max(def, a.Team.HandOvers())
		default:
			return def
		}
	}
	return def
}

// budgets are a task's token and cost budgets (0: none, its agent's).
type budgets struct {
	tokens int
	usd    float64
}

// childBudget is the token and cost budgets of the child that the delegate call
// keyed key starts, each when the parent's task has one (its own, else its
// agent's): what is left of it at the call (less what the parent's model calls and
// its earlier sub-agents spent, as recorded before the call), shared equally by the
// delegate calls requested with this one (the model's reply's, or a team's fan-out:
// they run side by side), and no more than the child's agent's own. 0 where the
// parent has none: the child runs under its agent's. It follows from the parent's
// events before the call and, when its task sets no max_tokens (max_cost_usd),
// its agent's configured budget, which is not recorded, so a call performed again
// on a node with the same agents computes the same; the
// child's task records it. A budget already spent is an error: no child starts.
// From decision rules 11 (the parent's: actors.SharesFloored) the calls are
// admitted against what is left of a token budget: when an equal share would be
// less than actors.MinSubAgentTokens, only as many calls as each get that much
// start (but always the first: a call alone, a pipeline's stage, a fan-out's
// aggregator start with all that is left, however little, as under rules 10),
// the first requested, sharing it equally, and the others are errors
// (shareRefusal), the parent's model told to delegate fewer at once. The
// overspend is then at most one child's model call, as the parent's own last
// call may pass its budget. Under older rules each child got its share however
// small, and made its model call all the same (a budget stops a task after the
// call that reached it). A cost budget is shared equally, with no floor.
func (n *Node) childBudget(events []messages.Envelope, key messages.EffectKey, parent *messages.TaskSubmitted, childAgent string) (budgets, error) {
	parentAgent := n.agentBudgets(parent.Agent)
	budget := budgets{tokens: cmp.Or(parent.MaxTokens, parentAgent.tokens), usd: cmp.Or(parent.MaxCostUSD, parentAgent.usd)}
	if budget == (budgets{}) {
		return budgets{}, nil
	}
	var (
		used, inReply, recorded int
		before                  int // the calls side by side requested before this one
		usedUSD                 float64
		taskID, cause           string
	)
	for _, e := range events {
		if e.Seq == key.Seq {
			taskID, cause = e.CorrelationID, e.CausationID
		}
	}
	for _, e := range events {
		if e.CorrelationID != taskID {
			continue
		}
		switch {
		case e.Type == messages.TypeToolCallRequested && e.CausationID == cause:
		case e.Seq < key.Seq && (e.Type == messages.TypeModelResponded || e.Type == messages.TypeToolCallCompleted):
		default:
			continue
		}
		p, err := e.Decode()
		if err != nil {
			return budgets{}, fmt.Errorf("delegate: the parent's event %d: %w", e.Seq, err)
		}
		switch p := p.(type) {
		case *messages.ModelResponded:
			used += p.Usage.Tokens()
			usedUSD += p.Usage.CostUSD
			if e.ID == cause {
				for _, c := range p.Message.ToolCalls {
					if c.Name == DelegateTool {
						inReply++
					}
				}
			}
		case *messages.ToolCallCompleted:
			used += p.Usage.Tokens()
			usedUSD += p.Usage.CostUSD
		case *messages.ToolCallRequested:
			if p.Tool == DelegateTool {
				recorded++
				if e.Seq < key.Seq {
					before++
				}
			}
		}
	}
	// The calls side by side: those the model's reply requested, or those a
	// paradigm (a team's fan-out) requested at once, as recorded.
	ways := max(inReply, recorded, 1)
	own := n.agentBudgets(childAgent)
	var child budgets
	if budget.tokens > 0 {
		left := budget.tokens - used
		if left <= 0 {
			return budgets{}, fmt.Errorf("delegate: the task's token budget of %d is spent (%d tokens used): no sub-agent can start", budget.tokens, used)
		}
		share := max(left/ways, 1)
		if actors.SharesFloored(parent) && share < actors.MinSubAgentTokens {
			// Admitted against the budget: as many as each get the least a
			// sub-agent's model call needs, the first requested, and the first
			// with what is left when that is less.
			fit := max(left/actors.MinSubAgentTokens, 1)
			if before >= fit {
				return budgets{}, shareRefusal(budget.tokens, left, ways, fit)
			}
			share = left / fit
		}
		child.tokens = share
		if own.tokens > 0 {
			child.tokens = min(child.tokens, own.tokens)
		}
	}
	if budget.usd > 0 {
		left := budget.usd - usedUSD
		if left <= 0 {
			return budgets{}, fmt.Errorf("delegate: the task's cost budget of $%.4f is spent ($%.4f used): no sub-agent can start", budget.usd, usedUSD)
		}
		child.usd = left / float64(ways)
		if own.usd > 0 {
			child.usd = min(child.usd, own.usd)
		}
	}
	return child, nil
}

// shareRefusal is the error of a delegate call refused under decision rules 11
// because what is left of its task's token budget (left of budget) gives each of
// the ways calls requested side by side less than actors.MinSubAgentTokens, and
// the fit (at least 1) calls requested first took it.
func shareRefusal(budget, left, ways, fit int) error {
	return fmt.Errorf("delegate: the task's token budget of %d has %d tokens left for the %d sub-agents delegated at once, "+
		"and a sub-agent needs at least %d: the first %d of them start, each with %d tokens, and this one does not; "+
		"delegate fewer at once, or do the rest yourself",
		budget, left, ways, actors.MinSubAgentTokens, fit, left/fit)
}

// agentBudgets is the token and cost budgets of the tasks of agent that set none:
// an agents file's agent's own, else the default agent's; 0 for none.
func (n *Node) agentBudgets(agent string) budgets {
	def := budgets{tokens: n.cfg.MaxTokens, usd: n.cfg.MaxCostUSD}
	for _, a := range n.cfg.Agents {
		if a.Name == agent {
			return budgets{tokens: cmp.Or(a.MaxTokens, def.tokens), usd: cmp.Or(a.MaxCostUSD, def.usd)}
		}
	}
	return def
}

// awaitChild waits for the end of the child's task taskID, from the child's live
// events and, in case they are late or lost, from its log (at once, for a call
// performed again after its child ended, then ever less often).
func (n *Node) awaitChild(ctx context.Context, agent, childID, taskID string, bound answerBound, live <-chan messages.Envelope) (string, error) {
	poll := 250 * time.Millisecond
	check := time.NewTimer(0)
	defer check.Stop()
	var read logTail // the last event read, with its digest; zero before the first
	for {
		select {
		case e, ok := <-live:
			if !ok {
				live = nil // fell behind: the log tells
				continue
			}
			if e.CorrelationID != taskID || (e.Type != messages.TypeTaskCompleted && e.Type != messages.TypeTaskFailed) {
				continue
			}
			p, err := e.Decode()
			if err != nil {
				return "", fmt.Errorf("delegate: child session %s: %w", childID, err)
			}
			reportChildUsage(ctx, p)
			return childOutcome(agent, childID, p, bound)
		case <-check.C:
			p, err := n.childEnd(ctx, childID, taskID, &read)
			switch {
			case err != nil && ctx.Err() == nil:
				n.cfg.Logger.Warn("delegate: read the child session", "session", childID, "err", err)
			case p != nil:
				reportChildUsage(ctx, p)
				return childOutcome(agent, childID, p, bound)
			}
			check.Reset(poll)
			poll = min(2*poll, 5*time.Second)
		case <-ctx.Done():
			// The node stopping ends it too (its effects close): unanswered, as a
			// kill would leave it, it is performed again when the parent resumes, and
			// waits for the same child. A call its parent cancelled cancels the child
			// as it returns (delegateCalls).
			return "", context.Cause(ctx)
		}
	}
}

// childEnd returns the event payload that ended the child's task, or nil while it
// runs. It reads the child's log from the last event read finds there (read, the
// zero value for the first read) on, when the log still holds that event at its
// seq (its ID and digest, logTail.heldIn, as a kept fold's is checked: a child
// session pruned and begun again does not pass for it), else from its first: a
// task's end is after the events it was not among, so the answer is the whole
// history's, and a wait of minutes on a long child reads each of its events about
// once, not its whole history at each poll.
func (n *Node) childEnd(ctx context.Context, childID, taskID string, read *logTail) (messages.Payload, error) {
	var (
		events []messages.Envelope
		held   bool
	)
	if len(read.ids) > 0 {
		tail, err := n.log.Read(ctx, childID, read.from)
		if err != nil {
			return nil, err
		}
		var after int
		if after, held = read.heldIn(tail); held {
			events = tail[after:]
		}
	}
	if !held {
		all, err := n.log.Read(ctx, childID, 1)
		if err != nil {
			return nil, err
		}
		events = all
	}
	for _, e := range events {
		if e.CorrelationID == taskID && (e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed) {
			return e.Decode()
		}
	}
	if len(events) > 0 {
		*read = tailOf(events, 1)
	}
	return nil, nil
}

// reportChildUsage reports what the child whose task p ended spent, its own model
// calls and its sub-agents', as the delegate call's (tools.ReportUsage): it counts
// against the parent task's budget.
func reportChildUsage(ctx context.Context, p messages.Payload) {
	switch p := p.(type) {
	case *messages.TaskCompleted:
		tools.ReportUsage(ctx, p.Usage.Add(p.SubAgentsUsage))
	case *messages.TaskFailed:
		tools.ReportUsage(ctx, p.Usage.Add(p.SubAgentsUsage))
	}
}

// childOutcome is the delegate call's answer for the event that ended its child's
// task: the child's answer (cut to bound), or an error with its reason.
func childOutcome(agent, childID string, p messages.Payload, bound answerBound) (string, error) {
	switch p := p.(type) {
	case *messages.TaskCompleted:
		return bound.cut(p.Output, childID), nil
	case *messages.TaskFailed:
		return "", errors.New(cutError(fmt.Sprintf("sub-agent %s failed (%s) in child session %s: %s", agent, p.Reason, childID, p.Error), childID, bound.bytes))
	}
	return "", fmt.Errorf("delegate: child session %s: unexpected %T", childID, p)
}

// cutError returns the error of a delegate call whose child failed, msg, or, past
// bound bytes (the bound of the child's answer), its head and a note that says it
// was cut and where the whole of it is: at most bound bytes. A child's error may be
// far longer than any answer (a model error is kept up to actors.MaxModelError, a
// provider's error page), and it goes into the parent's conversation as an answer
// would.
func cutError(msg, childID string, bound int) string {
	if len(msg) <= bound {
		return msg
	}
	return cutWithNote(msg, bound, fmt.Sprintf("\n[cut: the sub-agent's error is %d bytes, more than %d; the whole of it is in child session %s]",
		len(msg), bound, childID))
}

// cutResult returns a child's answer, or, past bound bytes, its head and a note
// that says it was cut and where the whole of it is: at most bound bytes.
func cutResult(out, childID string, bound int) string {
	if len(out) <= bound {
		return out
	}
	return cutWithNote(out, bound, fmt.Sprintf("\n[cut: the sub-agent's answer is %d bytes, more than %d; the whole of it is the result of child session %s]",
		len(out), bound, childID))
}

// cutWithNote returns the head of s, cut between characters, and note after it:
// at most bound bytes in all.
func cutWithNote(s string, bound int, note string) string {
	cut := max(bound-len(note), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) { // not inside a character
		cut--
	}
	return s[:cut] + note
}

// cutMemberAnswer returns a team's member's answer out, past bound bytes, cut in
// its middle: its head, a note on a line of its own that says it was cut and where
// the whole of it is, and the lines that close it with directives for the team
// (actors.TeamDirectivesAt: its closing STATE lines, blank lines among them, and a
// last HANDOFF line), so the team takes from it the facts and the handoff the
// whole answer holds (decision rules 8 read them only at an answer's end: a cut
// at the end lost them). At most bound bytes. When the directive lines alone
// leave no room, their trailing blanks and spaces are dropped (no directive
// reads them), then their first lines, as many as must be: the last lines, the
// HANDOFF line among them, are kept (a fact written twice is the last one
// anyway). ok is false, and out is left to cutResult (its head, the note at its
// end), when the answer is within bound, closes with no directive, or its last
// directive line alone leaves no room.
func cutMemberAnswer(out, childID string, bound int) (cut string, ok bool) {
	at := actors.TeamDirectivesAt(out)
	if len(out) <= bound || at == len(out) {
		return "", false
	}
	note := fmt.Sprintf("\n[cut: the sub-agent's answer is %d bytes, more than %d: its middle is cut here, its closing STATE and HANDOFF lines kept; "+
		"the whole of it is the result of child session %s]\n", len(out), bound, childID)
	tail, room := out[at:], bound-len(note)
	if len(tail) > room {
		tail = strings.TrimRight(tail, "\t\n\f\r ") // as the directives' `\s*$` trims
	}
	if len(tail) > room {
		if room <= 0 {
			return "", false
		}
		i := strings.IndexByte(tail[len(tail)-room-1:], '\n') // the first line that fits whole
		if i < 0 || i == room {
			return "", false
		}
		tail = tail[len(tail)-room+i:]
	}
	head := min(at, room-len(tail))
	for head > 0 && !utf8.RuneStart(out[head]) { // not inside a character
		head--
	}
	return out[:head] + note + tail, true
}

// cancelChild cancels the task of the child session childID of a delegate call
// that its parent cancelled. A child with no running task (none was started, or it
// ended) is left as it is.
//
// In a cluster the cancellation goes to the child's owner over troupe.tasks, and
// is sent unless the child's log shows its task ended: a child whose task was
// published (by this call, or an earlier performance of it) and not recorded yet
// is cancelled all the same, since the cancellation follows the task on the
// child's partition and its owner handles it after the task. One that finds no
// task there (the call never submitted it) is dropped by the owner (handleCancel).
//
// It gives up when ctx ends (the node's parentEnds closing past its timeout), and
// after Config.SubmitTimeout in any case. On an embedded node whose session host
// stopped (the node closed) nobody can cancel the child: it is resumed at the
// node's next start, and cancelled then (parentEnds.resumed).
func (n *Node) cancelChild(ctx context.Context, childID string) {
	cctx, done := context.WithTimeout(ctx, n.cfg.SubmitTimeout)
	defer done()
	const reason = "the parent's delegate call was cancelled"
	var err error
	switch {
	case n.sharded():
		err = n.cancelChildOnBus(cctx, childID, reason)
	case n.hostStopped.Load():
		err = errors.New("the node closed: the child is cancelled when it resumes at the node's next start")
	default:
		err = n.Cancel(cctx, childID, reason)
	}
	if err != nil && !errors.Is(err, actors.ErrNoRunningTask) {
		n.cfg.Logger.Warn("delegate: cancel the child's task", "session", childID, "err", err)
	}
}

// cancelChildOnBus sends the cancellation of child session childID to its owner,
// unless the child's log shows its task ended (ErrNoRunningTask): a child whose
// log records no task yet is cancelled too (its task may be on its way), and so is
// one whose log could not be read in half of Config.SubmitTimeout (the owner drops a
// cancellation of a session with no running task, handleCancel): a read that
// timed out left the child to run until its deadline.
func (n *Node) cancelChildOnBus(ctx context.Context, childID, reason string) error {
	c, err := n.ingress.AdmitCancel(childID, reason)
	if err != nil {
		return err
	}
	// The read gets half of the time: a log that does not answer leaves the
	// other half to send the cancellation.
	rctx, done := context.WithTimeout(ctx, n.cfg.SubmitTimeout/2)
	status, ok, err := n.Status(rctx, childID)
	done()
	switch {
	case err != nil && ctx.Err() != nil:
		return err // given up (the node closes)
	case err != nil:
		n.cfg.Logger.Warn("delegate: read the child's status to cancel its task; cancelling it all the same",
			"session", childID, "err", err)
	case ok && status.Status != messages.StatusRunning:
		return actors.ErrNoRunningTask
	case ok:
		c.TaskID = status.TaskID // read again, it cancels no later task
	}
	return n.sendCancel(ctx, c)
}
