package consolidator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
)

// Target is the memory namespace a consolidator maintains. *memory.Namespace
// satisfies it. Every method that changes something takes an idempotency key: a key
// the namespace has already applied is not applied again (its earlier result is
// returned). A method given the ID of a memory that no longer exists returns an
// error wrapping memory.ErrNotFound; a malformed request, one wrapping
// memory.ErrInvalid, having changed nothing. Each change is an event of the
// namespace, with its reason.
//
// Run gives each change memory.Expect with the versions (memory.Memory.Version) of
// the memories its decision stands on, as planned: a target that versions its
// memories refuses the change, with an error wrapping memory.ErrChanged, when
// another writer changed one of them since, checked atomically with the write
// (memory.WriteOptions.Check); a memory whose Version is 0 is not checked.
type Target interface {
	// Name is the namespace's name, e.g. "user:alice".
	Name() string
	// Snapshot returns every live memory, invalid ones included.
	Snapshot() []memory.Memory
	Forget(ctx context.Context, key string, ids []string, reason string, opts ...memory.WriteOption) error
	// Merge folds the merged memories into into, which keeps their sources and
	// metadata, and returns it.
	Merge(ctx context.Context, key, into string, merged []string, reason string, opts ...memory.WriteOption) (memory.Memory, error)
	Promote(ctx context.Context, key, id string, to memory.Tier, reason string, opts ...memory.WriteOption) (memory.Memory, error)
	// Distill adds a semantic memory whose sources are the given memories.
	Distill(ctx context.Context, key string, sources []string, content string, importance float64, reason string, opts ...memory.WriteOption) (memory.Memory, error)
	// Invalidate marks id invalid from now on, contradicted by the memory by.
	Invalidate(ctx context.Context, key, id, by, reason string, opts ...memory.WriteOption) error
}

// Releaser is implemented by targets that SchedulerConfig.Open holds for the run
// (a node holds the namespace in memory, memory.Memories.Hold, so that it is not
// released in the middle of a run): the scheduler calls Release when the run ends.
type Releaser interface {
	Release()
}

// Forgetting is implemented by targets that remember what the facts they forgot
// were distilled from (*memory.Namespace): Run does not distil such a cluster again,
// which would bring back, at every run, a fact its user let go.
type Forgetting interface {
	// ForgottenSources returns the memory sources of each semantic memory forgotten.
	ForgottenSources() [][]string
}

// Refresher is implemented by targets whose Snapshot shows the namespace as of their
// last operation (*memory.Namespace: other writers may have appended since). Run
// refreshes such a target before it plans and again before it applies.
type Refresher interface {
	Refresh(ctx context.Context) error
}

// Config configures a Consolidator.
type Config struct {
	// Model, when set, writes the facts distilled from clusters of episodic memories
	// and judges whether close facts contradict each other. Without one, nothing is
	// distilled and only functional relations are checked for conflicts (the Report
	// says so): the consolidator never makes text up.
	Model llm.Model
	// Policy says what to forget, merge, promote, distil and invalidate (zero fields
	// take their defaults: DefaultPolicy).
	Policy Policy
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives a line per run (default: discarded).
	Logger *slog.Logger
}

// Validate reports a configuration a Consolidator cannot run with.
func (c Config) Validate() error { return c.Policy.Validate() }

// Consolidator plans and applies the maintenance of memory namespaces: Run does one
// pass over one namespace. It holds no state between runs and is safe for concurrent
// use, but two runs on one namespace at once would plan from the same memories: the
// actor (NamespaceActor) runs one at a time.
type Consolidator struct {
	model  llm.Model
	policy Policy
	now    func() time.Time
	logger *slog.Logger
}

// New returns a Consolidator, or the error of Config.Validate.
func New(cfg Config) (*Consolidator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Consolidator{model: cfg.Model, policy: cfg.Policy.withDefaults(), now: cfg.Now, logger: cfg.Logger}
	if c.now == nil {
		c.now = time.Now
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Report says what a run did.
type Report struct {
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
	// Forgotten, Merged (merged away), Promoted and Invalidated count memories;
	// Distilled counts the semantic memories made.
	Forgotten   int `json:"forgotten"`
	Merged      int `json:"merged"`
	Promoted    int `json:"promoted"`
	Distilled   int `json:"distilled"`
	Invalidated int `json:"invalidated"`
	// Decisions are the decisions applied, in order.
	Decisions []Decision `json:"decisions"`
	// Skipped says, a line each, what was planned but not applied and why (no model,
	// an unreadable answer, a memory gone meanwhile, a fact judged compatible).
	Skipped []string `json:"skipped,omitempty"`
	// Stalled names the questions to the model (a cluster to distil, a pair of facts
	// to judge; Question) that this run was cut short on: its share of the run ran
	// out, or the run ended while it was asked. The questions of AskLast that a run
	// cut short did not get to stay in it. A NamespaceActor gives them to its next
	// run (AskLast), which asks them after the others, so that one question the
	// model stalls on does not keep the others from being asked run after run.
	Stalled []string `json:"stalled,omitempty"`
	// Settled names the answers of the model that changed nothing (Answer: two
	// facts judged compatible, a cluster without a durable fact), this run's and
	// those of Settled that still hold (all those of Settled when the run ended
	// before it planned: it checked none). A NamespaceActor gives them to its next run
	// (Settled), which does not ask those questions again while their memories are
	// as they were: before, every run asked the model the same questions, and the
	// closest compatible pairs took the run's MaxJudgements for ever, the others
	// never judged.
	Settled []string `json:"settled,omitempty"`
}

// Question names the question d puts to the model, the same in every run
// ("distill-1f2e…": DecisionKey without the run's key), as Report.Stalled and
// AskLast name it.
func Question(d Decision) string { return strings.TrimPrefix(DecisionKey("", d), "/") }

// RunOption adjusts one run (Run).
type RunOption func(*runOptions)

type runOptions struct {
	last    []string
	isLast  map[string]bool
	settled map[string]bool
}

// AskLast has the run ask the questions named (Question) after the others, in the
// order of the plan: those an earlier run was cut short on (Report.Stalled).
func AskLast(questions ...string) RunOption {
	return func(o *runOptions) {
		if o.isLast == nil {
			o.isLast = map[string]bool{}
		}
		for _, q := range questions {
			if !o.isLast[q] {
				o.isLast[q] = true
				o.last = append(o.last, q)
			}
		}
	}
}

// String is the report as the memory tool's consolidate action shows it.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "consolidated %s: forgot %d, merged %d, promoted %d, distilled %d, invalidated %d",
		r.Namespace, r.Forgotten, r.Merged, r.Promoted, r.Distilled, r.Invalidated)
	for _, d := range r.Decisions {
		b.WriteString("\n- " + d.String())
	}
	if len(r.Skipped) > 0 {
		b.WriteString("\nnot applied:")
		for _, s := range r.Skipped {
			b.WriteString("\n- " + s)
		}
	}
	return b.String()
}

// Run consolidates t once: it plans from t's snapshot (Plan), applies the decisions
// that need no model through t, then asks the model for each distilled fact and
// conflict judgement in turn, applying each answer before the next question (a run
// cut short keeps every answer it got), each decision with the idempotency key
// DecisionKey(key, d). A run repeated with the same key
// (after a crash, say) applies nothing twice: decisions already applied are either
// no longer planned (their memories changed) or carry a key t has already seen.
// Decisions whose memories vanished meanwhile are skipped, as are those the model
// could not help with, each with a line in Report.Skipped. The error is a failure of
// t (not ErrNotFound or ErrInvalid, which skip the decision) or of ctx: the Report
// then holds what was applied before it.
//
// The questions to the model share the run's time (its context's deadline): while
// others wait after it, a question may take at most half of what remains of the
// run, the last one all of it, so that a question the model stalls on leaves the
// others at least half the run. The questions a run was cut short on are in
// Report.Stalled; AskLast has a run ask them after the others.
func (c *Consolidator) Run(ctx context.Context, t Target, key string, opts ...RunOption) (rep Report, err error) {
	var o runOptions
	for _, opt := range opts {
		opt(&o)
	}
	rep = Report{Namespace: t.Name(), Key: key}
	// asks are the questions to the model, next the first of them not asked yet
	// (-1 until they are listed): a run cut short before a question it was to ask
	// last keeps it so (Report.Stalled).
	var asks []Decision
	next := -1
	didPlan := false
	defer func() {
		if err == nil {
			return
		}
		if !didPlan {
			// Not planned: none of the answers given was checked, all are kept.
			rep.Settled = slices.Sorted(maps.Keys(o.settled))
		}
		if next < 0 {
			rep.Stalled = append(rep.Stalled, o.last...)
			return
		}
		for _, d := range asks[next:] {
			if q := Question(d); o.isLast[q] {
				rep.Stalled = append(rep.Stalled, q)
			}
		}
	}()
	if key == "" {
		return rep, fmt.Errorf("%w: consolidation of %s without an idempotency key", memory.ErrInvalid, rep.Namespace)
	}
	if err := refresh(ctx, t); err != nil {
		return rep, err
	}
	now := c.now()
	snap := t.Snapshot()
	// What each memory was when planned: a decision whose memories another writer
	// changed meanwhile (rewrote, re-weighed, moved) is not applied, its reason no
	// longer holding; the run's own changes are kept here as they are made.
	asPlanned := make(map[string]seen, len(snap))
	for _, m := range snap {
		asPlanned[m.ID] = seenAs(m)
	}

	// Forgetting by age (rule 1, the first of the plan, which no other rule comes
	// before) is planned and applied on its own first: it takes one pass over the
	// memories, while the pairwise rules of a large namespace may take longer than
	// the run has (its timeout), and a namespace too large to dedupe must still
	// forget. The plan of the other rules then starts from what is left, as the
	// whole plan would have.
	if old := planOld(now, snap, c.policy); len(old) > 0 {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		live := snapshot(t)
		decided := map[string]bool{}
		for _, d := range old {
			if err := c.applyOne(ctx, t, key, d, asPlanned, live, &rep); err != nil {
				return rep, err
			}
			for _, id := range d.IDs {
				decided[id] = true
			}
		}
		// The rest is planned from the same snapshot, less what rule 1 decided
		// (applied, or gone meanwhile), as the whole plan would have: a target
		// whose snapshot lags its writes gets no decision of rule 1 twice.
		snap = slices.DeleteFunc(snap, func(m memory.Memory) bool { return decided[m.ID] })
	}
	var letGo [][]string
	if f, ok := t.(Forgetting); ok {
		letGo = f.ForgottenSources()
	}
	planned, settled, err := planContext(ctx, now, snap, letGo, o.settled, c.policy)
	if err != nil {
		return rep, fmt.Errorf("consolidator: planning %s: %w", rep.Namespace, err)
	}
	rep.Settled, didPlan = settled, true

	// The decisions that need no model are applied at once, against the namespace
	// as it is now (planning a large namespace takes a while; a run cut short later
	// keeps them).
	if err := refresh(ctx, t); err != nil {
		return rep, err
	}
	live := snapshot(t)
	var last []Decision
	for _, d := range planned {
		if d.Kind == Distill || d.Kind == Invalidate && d.Judge {
			if o.isLast[Question(d)] {
				last = append(last, d)
			} else {
				asks = append(asks, d)
			}
			continue
		}
		if err := c.applyOne(ctx, t, key, d, asPlanned, live, &rep); err != nil {
			return rep, err
		}
	}
	asks, next = append(asks, last...), 0

	// Then each question to the model, its answer applied as soon as it comes: it
	// is recorded (the event of the fact written, of the memory invalidated) before
	// the next question, so that a run cut short (a kill, the run's timeout) never
	// throws away an answer it was given, and the run after it asks only what was
	// not answered.
	step, unjudged := 0, 0
	for i, d := range asks {
		next = i + 1
		if c.model == nil {
			if d.Kind == Distill {
				rep.skip(d, "no model configured: a cluster is distilled by a model only")
			} else {
				unjudged++
			}
			continue
		}
		if gone := vanished(d, live); gone != "" {
			rep.skip(d, gone+" vanished meanwhile")
			continue
		}
		if moved := changed(d, asPlanned, live); moved != "" {
			rep.skip(d, moved+" changed meanwhile")
			continue
		}
		step++
		var (
			ok  bool
			err error
		)
		qctx, cancel := share(ctx, len(asks)-i-1)
		if d.Kind == Distill {
			ok, err = c.distill(qctx, key, step, &d, live)
		} else {
			ok, err = c.judge(qctx, key, step, &d, live)
		}
		outOfTime := err != nil && qctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			rep.Stalled = append(rep.Stalled, Question(d))
			return rep, ctx.Err()
		}
		switch {
		case outOfTime:
			rep.Stalled = append(rep.Stalled, Question(d))
			rep.skip(d, err.Error()+" (its share of the run ran out: the next run asks it last)")
			continue
		case err != nil:
			rep.skip(d, err.Error())
			continue
		case !ok && d.Kind == Distill:
			rep.skip(d, "the model found no durable fact in them")
			rep.settle(d, asPlanned)
			continue
		case !ok:
			rep.skip(d, "not contradicted: "+d.Reason)
			rep.settle(d, asPlanned)
			continue
		}
		// The model may have taken a while: apply against the namespace as it is now.
		if _, stale := t.(Refresher); stale {
			if err := refresh(ctx, t); err != nil {
				return rep, err
			}
			live = snapshot(t)
		}
		if err := c.applyOne(ctx, t, key, d, asPlanned, live, &rep); err != nil {
			return rep, err
		}
	}
	if unjudged > 0 {
		rep.Skipped = append(rep.Skipped, fmt.Sprintf("%d pair(s) of close facts not judged for conflicts: no model configured", unjudged))
	}
	c.logger.Info("memory consolidated", "namespace", rep.Namespace, "key", key,
		"forgotten", rep.Forgotten, "merged", rep.Merged, "promoted", rep.Promoted,
		"distilled", rep.Distilled, "invalidated", rep.Invalidated, "skipped", len(rep.Skipped))
	return rep, nil
}

// share is the context of a question with after questions still to ask after it:
// while there are, it may take at most half of what remains of ctx (the run's
// deadline), so that a question the model stalls on (a route that hangs, retried
// past the run's timeout) leaves the others at least half the run; the last
// question, or one of a run without a deadline, has all of ctx.
func share(ctx context.Context, after int) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || after == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, time.Until(deadline)/2)
}

// snapshot is t's memories by ID.
func snapshot(t Target) map[string]memory.Memory { return byID(t.Snapshot()) }

// byID is mems by ID.
func byID(mems []memory.Memory) map[string]memory.Memory {
	live := make(map[string]memory.Memory, len(mems))
	for _, m := range mems {
		live[m.ID] = m
	}
	return live
}

// applyOne applies d unless one of its memories vanished or changed since it was
// planned, and reports it in rep; the error is a failure of t or of ctx, which ends
// the run.
func (c *Consolidator) applyOne(ctx context.Context, t Target, key string, d Decision, planned map[string]seen, live map[string]memory.Memory, rep *Report) error {
	if gone := vanished(d, live); gone != "" {
		rep.skip(d, gone+" vanished meanwhile")
		return nil
	}
	if moved := changed(d, planned, live); moved != "" {
		rep.skip(d, moved+" changed meanwhile")
		return nil
	}
	err := c.apply(ctx, t, key, &d, planned, live)
	switch {
	case err == nil:
		rep.count(d)
		// The run's own change is what later decisions expect of these memories.
		for _, id := range append(d.needs(), d.Into) {
			if m, ok := live[id]; ok {
				planned[id] = seenAs(m)
			}
		}
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, memory.ErrNotFound):
		rep.skip(d, "a memory vanished meanwhile: "+err.Error())
	case errors.Is(err, memory.ErrChanged):
		// Another writer changed a memory after the checks above, before the
		// write: the namespace refused it. The next run plans from what it is.
		rep.skip(d, "a memory changed meanwhile: "+err.Error())
	case errors.Is(err, memory.ErrInvalid):
		rep.skip(d, "refused by the namespace: "+err.Error())
	default:
		return fmt.Errorf("consolidator: %s: %s: %w", rep.Namespace, d.Kind, err)
	}
	return nil
}

func refresh(ctx context.Context, t Target) error {
	if r, ok := t.(Refresher); ok {
		if err := r.Refresh(ctx); err != nil {
			return fmt.Errorf("consolidator: refresh %s: %w", t.Name(), err)
		}
	}
	return nil
}

func (r *Report) skip(d Decision, why string) {
	r.Skipped = append(r.Skipped, d.subject()+": "+why)
}

// settle records that the model's answer to d, asked about its memories as planned,
// changed nothing.
func (r *Report) settle(d Decision, planned map[string]seen) {
	r.Settled = append(r.Settled, Answer(d, func(id string) (uint64, string) {
		p := planned[id]
		return p.version, p.content
	}))
}

func (r *Report) count(d Decision) {
	switch d.Kind {
	case Forget:
		r.Forgotten += len(d.IDs)
	case Merge:
		r.Merged += len(d.IDs)
	case Promote:
		r.Promoted += len(d.IDs)
	case Distill:
		r.Distilled++
	case Invalidate:
		r.Invalidated += len(d.IDs)
	}
	r.Decisions = append(r.Decisions, d)
}

// needs lists the memories d acts on or stands on.
func (d Decision) needs() []string {
	need := append([]string(nil), d.IDs...)
	if d.Into != "" && d.Kind == Merge {
		need = append(need, d.Into)
	}
	if d.By != "" {
		need = append(need, d.By)
	}
	return need
}

// vanished names a memory d needs that live lacks ("" when all are there).
func vanished(d Decision, live map[string]memory.Memory) string {
	for _, id := range d.needs() {
		if _, ok := live[id]; !ok {
			return id
		}
	}
	return ""
}

// seen is what a decision stands on of a memory: changed, the decision may no
// longer hold. version is the memory's (memory.Memory.Version), which every change
// of it changes: the write expects it (memory.Expect).
type seen struct {
	version    uint64
	hash       string
	content    string
	tier       memory.Tier
	modality   memory.Modality
	importance float64
	at         time.Time
	valid      bool
}

func seenAs(m memory.Memory) seen {
	return seen{version: m.Version, hash: m.Hash, content: m.Content, tier: m.Tier, modality: m.Modality, importance: m.Importance,
		at: m.Timestamp, valid: m.InvalidAt == nil}
}

// changed names a memory d needs whose version, content, tier, importance, time or
// validity live holds otherwise than the plan saw them ("" when none): another
// writer changed it after the plan, and the decision's reason (a cosine, an
// importance, an age) may no longer hold. The next run plans from what it is now.
func changed(d Decision, planned map[string]seen, live map[string]memory.Memory) string {
	for _, id := range d.needs() {
		p, ok := planned[id]
		if !ok {
			continue
		}
		if l := seenAs(live[id]); p.version != l.version || p.hash != l.hash || p.content != l.content || p.tier != l.tier || p.modality != l.modality ||
			p.importance != l.importance || !p.at.Equal(l.at) || p.valid != l.valid {
			return id
		}
	}
	return ""
}

// expect is the option of a write that stands on the memories ids: their versions
// as planned (a memory whose version is unknown, 0, is not checked).
func expect(planned map[string]seen, ids ...string) memory.WriteOption {
	v := make(map[string]uint64, len(ids))
	for _, id := range ids {
		if p, ok := planned[id]; ok && p.version != 0 {
			v[id] = p.version
		}
	}
	return memory.Expect(v)
}

// apply performs d through t, each write expecting the memories it stands on at
// their versions as planned, and updates live as the namespace now is.
func (c *Consolidator) apply(ctx context.Context, t Target, key string, d *Decision, planned map[string]seen, live map[string]memory.Memory) error {
	k := DecisionKey(key, *d)
	switch d.Kind {
	case Forget:
		if err := t.Forget(ctx, k, d.IDs, d.Reason, expect(planned, d.IDs...)); err != nil {
			return err
		}
		for _, id := range d.IDs {
			delete(live, id)
		}
	case Merge:
		m, err := t.Merge(ctx, k, d.Into, d.IDs, d.Reason, expect(planned, d.needs()...))
		if err != nil {
			return err
		}
		for _, id := range d.IDs {
			delete(live, id)
		}
		live[m.ID] = m
	case Promote:
		for i, id := range d.IDs {
			m, err := t.Promote(ctx, each(k, i, len(d.IDs)), id, d.To, d.Reason, expect(planned, id))
			if err != nil {
				return err
			}
			live[m.ID] = m
		}
	case Distill:
		m, err := t.Distill(ctx, k, d.IDs, d.Content, d.Importance, d.Reason, expect(planned, d.IDs...))
		if err != nil {
			return err
		}
		d.Into = m.ID
		live[m.ID] = m
	case Invalidate:
		for i, id := range d.IDs {
			if err := t.Invalidate(ctx, each(k, i, len(d.IDs)), id, d.By, d.Reason, expect(planned, id, d.By)); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%w: unknown decision kind %q", memory.ErrInvalid, d.Kind)
	}
	return nil
}

// each is the key of the i-th of n calls a decision makes (the planner's promotions
// and invalidations are one memory each, so one call).
func each(k string, i, n int) string {
	if n == 1 {
		return k
	}
	return fmt.Sprintf("%s/%d", k, i+1)
}

// DecisionKey is the idempotency key a run keyed key applies d with: key, a slash,
// the kind and a digest of the memories d acts on ("K/forget-1f2e…"). It names the
// decision, not its place in the plan, so a re-planned run whose decisions shifted
// cannot pair a key already used with another decision; a distillation's key does
// not depend on the text the model wrote.
func DecisionKey(key string, d Decision) string {
	parts := []string{string(d.Kind), d.Into, d.By, string(d.To)}
	if d.Kind == Distill {
		// Into is the result of a distillation, not part of what it decides.
		parts = parts[:1]
	}
	h := sha256.New()
	for _, p := range append(parts, d.IDs...) {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return key + "/" + string(d.Kind) + "-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// scope names the consolidator as the caller of its model calls (quotas, caches).
var scope = llm.Scope{Agent: "consolidator"}

// distill asks the model for the fact of a cluster; ok is false when it found none.
func (c *Consolidator) distill(ctx context.Context, key string, step int, d *Decision, byID map[string]memory.Memory) (bool, error) {
	mems := make([]memory.Memory, 0, len(d.IDs))
	for _, id := range d.IDs {
		mems = append(mems, byID[id])
	}
	res, err := c.model.Generate(ctx, llm.Request{Key: DecisionKey(key, *d) + "/model", Step: step, Messages: distillPrompt(mems), Scope: scope})
	if err != nil {
		return false, fmt.Errorf("model %s failed, nothing distilled: %w", c.model.Name(), err)
	}
	fact, imp, ok, err := parseFact(res.Message.Content)
	if err != nil {
		return false, fmt.Errorf("model %s answered what cannot be read, nothing distilled: %w", c.model.Name(), err)
	}
	if err := c.namesOnlyShown(res.Message.Content, *d, byID); err != nil {
		return false, err
	}
	// A model's text may hold bytes no memory takes (a NUL copied from an old
	// memory): the fact is kept without them rather than failing the run.
	if fact = strings.TrimSpace(memory.CleanText(unquoteMemory(fact))); !ok || fact == "" {
		return false, nil
	}
	d.Content = fact
	if imp >= 0 {
		d.Importance = imp
	}
	d.Reason += "; summarised by " + c.model.Name()
	return true, nil
}

// judge asks the model whether d.By contradicts d.IDs[0].
func (c *Consolidator) judge(ctx context.Context, key string, step int, d *Decision, byID map[string]memory.Memory) (bool, error) {
	res, err := c.model.Generate(ctx, llm.Request{Key: DecisionKey(key, *d) + "/model", Step: step,
		Messages: judgePrompt(byID[d.IDs[0]], byID[d.By]), Scope: scope})
	if err != nil {
		return false, fmt.Errorf("model %s failed, conflict not judged: %w", c.model.Name(), err)
	}
	yes, why, err := parseJudgement(res.Message.Content)
	if err != nil {
		return false, fmt.Errorf("model %s answered what cannot be read, conflict not judged: %w", c.model.Name(), err)
	}
	if err := c.namesOnlyShown(res.Message.Content, *d, byID); err != nil {
		return false, err
	}
	if why = unquoteMemory(why); why == "" {
		why = "no reason given"
	}
	verdict := "contradicts it"
	if !yes {
		verdict = "compatible"
	}
	d.Reason = fmt.Sprintf("%s; judged %s by %s: %s", d.Reason, verdict, c.model.Name(), why)
	return yes, nil
}

// namesOnlyShown refuses an answer to d's question that names a memory the
// question did not show: another memory of the namespace (byID), or an ID of the
// namespace's making (memory.Namespace's "m_" and 16 hex digits) that none has. The
// answer to a question is about its memories alone, and only they are ever changed
// by it; an answer naming another (a decision about it, a reason or fact that
// points at it) was steered by what it read, or made it up, and is not applied:
// its reason or fact would otherwise stand in the namespace's events. A word of
// the answer names a memory when it is the memory's whole ID. An ID the shown
// memories' text holds (a note quoting another memory's ID) is what the answer
// read, not a memory it names: refused, such a memory's every question would be
// asked again at every run, a model call each, and never settled.
func (c *Consolidator) namesOnlyShown(answer string, d Decision, byID map[string]memory.Memory) error {
	shown := d.needs()
	quoted := map[string]bool{}
	for _, id := range shown {
		for _, word := range strings.FieldsFunc(byID[id].Content, notIDRune) {
			quoted[word] = true
		}
	}
	for _, word := range strings.FieldsFunc(answer, notIDRune) {
		if slices.Contains(shown, word) || quoted[word] {
			continue
		}
		if _, ok := byID[word]; !ok && !madeID(word) {
			continue
		}
		c.logger.Warn("memory consolidation refused a model's answer naming a memory its question did not show",
			"model", c.model.Name(), "decision", d.subject(), "named", word)
		return fmt.Errorf("model %s named memory %s, which its question did not show: answer refused, nothing applied", c.model.Name(), word)
	}
	return nil
}

// notIDRune reports whether r cannot be part of a memory ID as an answer names
// one: IDs are letters, digits, "_" and "-".
func notIDRune(r rune) bool {
	return !(r == '_' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r))
}

// madeID reports whether s has the shape of an ID a namespace makes: "m_" and 16
// hexadecimal digits.
func madeID(s string) bool {
	if len(s) != 18 || !strings.HasPrefix(s, "m_") {
		return false
	}
	for _, c := range []byte(s[2:]) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
