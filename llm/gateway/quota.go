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
// request's scope has spent its tokens in the window; the error wraps
// ErrQuotaExceeded. A call that is let through and answered is charged the answer's
// Usage (prompt + completion tokens), so the model it wraps must report real counts:
// wrap a model that counts them (CountTokens) when a provider may report none. A call
// that fails is not charged. Scopes that Config.Validate refuses never match. The
// spend is kept in memory, shared by every model the middleware wraps.
func Quotas(quotas []Quota, clock func() time.Time) Middleware {
	if clock == nil {
		clock = time.Now
	}
	q := &quotaBook{quotas: quotas, clock: clock, usage: map[string][]spend{}}
	return func(next llm.Model) llm.Model {
		if len(quotas) == 0 {
			return next
		}
		return &quotaModel{Model: next, book: q}
	}
}

type quotaModel struct {
	llm.Model
	book *quotaBook
}

func (m *quotaModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if err := m.book.check(req.Scope); err != nil {
		return llm.Response{}, err
	}
	resp, err := m.Model.Generate(ctx, req)
	if err != nil {
		return llm.Response{}, err
	}
	m.book.charge(req.Scope, int64(resp.Usage.PromptTokens+resp.Usage.CompletionTokens))
	return resp, nil
}

// quotaBook is the tokens spent per quota scope key ("agent:a").
type quotaBook struct {
	quotas []Quota
	clock  func() time.Time
	mu     sync.Mutex
	usage  map[string][]spend
}

type spend struct {
	at     time.Time
	tokens int64
}

// scopes returns the quota keys a request counts against, with their quotas.
func (b *quotaBook) scopes(s llm.Scope) []Quota {
	var out []Quota
	for _, q := range b.quotas {
		kind, name, _ := strings.Cut(q.Scope, ":")
		var have string
		switch kind {
		case "agent":
			have = s.Agent
		case "team":
			have = s.Team
		case "key":
			have = s.Key
		}
		if have == "" || (name != "*" && name != have) {
			continue
		}
		q.Scope = kind + ":" + have
		out = append(out, q)
	}
	return out
}

func (b *quotaBook) check(s llm.Scope) error {
	now := b.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, q := range b.scopes(s) {
		used := b.usedLocked(q, now)
		if used >= q.Tokens {
			return fmt.Errorf("%w for %s: %d of %d tokens used in the last %s", ErrQuotaExceeded, q.Scope, used, q.Tokens, q.Window)
		}
	}
	return nil
}

func (b *quotaBook) usedLocked(q Quota, now time.Time) int64 {
	spends := b.usage[q.Scope]
	cut := 0
	for cut < len(spends) && now.Sub(spends[cut].at) >= q.Window {
		cut++
	}
	spends = spends[cut:]
	b.usage[q.Scope] = spends
	var used int64
	for _, s := range spends {
		used += s.tokens
	}
	return used
}

func (b *quotaBook) charge(s llm.Scope, tokens int64) {
	if tokens <= 0 {
		return
	}
	now := b.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, q := range b.scopes(s) {
		b.usage[q.Scope] = append(b.usage[q.Scope], spend{at: now, tokens: tokens})
	}
}
