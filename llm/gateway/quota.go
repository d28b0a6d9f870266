package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/troupe-run/troupe/llm"
)

// Quotas refuses a call, before it reaches the model it wraps, when a quota of its
// request's scope has spent its tokens in the window, counting the calls still in
// flight at an estimate of their prompts (llm.EstimateTokens); the error wraps
// ErrQuotaExceeded. A call that is let through and answered is charged the answer's
// Usage (prompt + completion tokens), which replaces its estimate, so the model it
// wraps must report real counts: wrap a model that counts them (CountTokens) when a
// provider may report none. A call that fails is charged what it reports it spent
// (llm.Model: replies it could not use, attempts retried), nothing when it reports
// none. Counting the calls in flight bounds what concurrent calls spend: without it, every call that started
// before the first answer was charged passed the check, and twenty calls in flight
// spent twenty times a quota that one of them filled. Each quota keeps its own spend, over its own window, even
// where two apply to one scope ("agent:*" and "agent:a"). Scopes that Config.Validate
// refuses never match. The spend is kept in memory, shared by every model the
// middleware wraps.
func Quotas(quotas []Quota, clock func() time.Time) Middleware {
	if clock == nil {
		clock = time.Now
	}
	b := &quotaBook{clock: clock}
	for _, q := range quotas {
		kind, name, _ := strings.Cut(q.Scope, ":")
		b.quotas = append(b.quotas, quotaLedgers{Quota: q, kind: kind, name: name, spent: map[string]*ledger{}})
	}
	return func(next llm.Model) llm.Model {
		if len(quotas) == 0 {
			return next
		}
		return &quotaModel{Model: next, book: b}
	}
}

type quotaModel struct {
	llm.Model
	book *quotaBook
}

func (m *quotaModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	estimate := int64(max(llm.EstimateTokens(req.Messages), 1))
	if err := m.book.check(req.Scope, estimate); err != nil {
		return llm.Response{}, err
	}
	resp, err := m.Model.Generate(ctx, req)
	m.book.settle(req.Scope, estimate, int64(resp.Usage.PromptTokens+resp.Usage.CompletionTokens))
	if err != nil {
		return llm.Response{Usage: resp.Usage}, err
	}
	return resp, nil
}

// quotaBook is the tokens spent under each quota.
type quotaBook struct {
	clock  func() time.Time
	mu     sync.Mutex
	quotas []quotaLedgers
}

// quotaLedgers is one quota and its spend per scope it applies to: per agent for
// "agent:*", one ledger for "agent:a".
type quotaLedgers struct {
	Quota
	kind, name string
	spent      map[string]*ledger // by the request's agent, team or key
}

// ledger is the spends of one scope under one quota, oldest first, and their sum;
// and the estimates of its calls in flight (check reserves them, settle takes them
// back).
type ledger struct {
	spends   []spend
	used     int64
	reserved int64
}

type spend struct {
	at     time.Time
	tokens int64
}

// scope returns the name of s that q applies to ("a" for agent:* and agent "a"), or
// false when it does not apply.
func (q *quotaLedgers) scope(s llm.Scope) (string, bool) {
	var have string
	switch q.kind {
	case "agent":
		have = s.Agent
	case "team":
		have = s.Team
	case "key":
		have = s.Key
	}
	return have, have != "" && (q.name == "*" || q.name == have)
}

// check refuses a call of scope s when a quota of it has spent its tokens, its
// calls in flight counted at their estimates; else it reserves the call's
// estimate in each quota of s (settle takes it back).
func (b *quotaBook) check(s llm.Scope, estimate int64) error {
	now := b.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	var ledgers []*ledger
	for i := range b.quotas {
		q := &b.quotas[i]
		have, ok := q.scope(s)
		if !ok {
			continue
		}
		l := q.spent[have]
		if l == nil {
			l = &ledger{}
			q.spent[have] = l
		}
		l.expire(now, q.Window)
		if l.used+l.reserved >= q.Tokens {
			if l.reserved > 0 {
				return fmt.Errorf("%w for %s:%s: %d of %d tokens used in the last %s, and about %d more by the calls in flight", ErrQuotaExceeded, q.kind, have, l.used, q.Tokens, q.Window, l.reserved)
			}
			return fmt.Errorf("%w for %s:%s: %d of %d tokens used in the last %s", ErrQuotaExceeded, q.kind, have, l.used, q.Tokens, q.Window)
		}
		ledgers = append(ledgers, l)
	}
	for _, l := range ledgers {
		l.reserved += estimate
	}
	return nil
}

// settle takes back a call's estimate reserved by check, and charges what it spent.
func (b *quotaBook) settle(s llm.Scope, estimate, tokens int64) {
	b.mu.Lock()
	for i := range b.quotas {
		q := &b.quotas[i]
		if have, ok := q.scope(s); ok {
			if l := q.spent[have]; l != nil {
				l.reserved = max(l.reserved-estimate, 0)
			}
		}
	}
	b.mu.Unlock()
	b.charge(s, tokens)
}

// expire drops the spends older than the window.
func (l *ledger) expire(now time.Time, window time.Duration) {
	cut := 0
	for cut < len(l.spends) && now.Sub(l.spends[cut].at) >= window {
		l.used -= l.spends[cut].tokens
		cut++
	}
	l.spends = l.spends[cut:]
}

func (b *quotaBook) charge(s llm.Scope, tokens int64) {
	if tokens <= 0 {
		return
	}
	now := b.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.quotas {
		q := &b.quotas[i]
		have, ok := q.scope(s)
		if !ok {
			continue
		}
		l := q.spent[have]
		if l == nil {
			l = &ledger{}
			q.spent[have] = l
		}
		l.expire(now, q.Window)
		l.spends = append(l.spends, spend{at: now, tokens: tokens})
		l.used += tokens
	}
}
