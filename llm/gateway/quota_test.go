package gateway_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
)

func TestQuotasRefuseBeforeTheCallAndChargeTheAnswersTokens(t *testing.T) {
	c := &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	m := answering("m", "ok") // 10 prompt + 5 completion tokens
	q := gateway.Quotas([]gateway.Quota{{Scope: "agent:a", Tokens: 20, Window: time.Hour}}, c.Now)(m)
	ctx := context.Background()
	for i := 0; i < 2; i++ { // 0 then 15 tokens used: both under 20
		if _, err := q.Generate(ctx, ask("q")); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	_, err := q.Generate(ctx, ask("q"))
	if !errors.Is(err, gateway.ErrQuotaExceeded) || !strings.Contains(err.Error(), "agent:a: 30 of 20 tokens used in the last 1h0m0s") {
		t.Fatalf("err %v", err)
	}
	if m.calls.Load() != 2 {
		t.Fatalf("a refused call reached the model: %d calls", m.calls.Load())
	}
	// The quota names agent a: agent b is not limited by it.
	other := ask("q")
	other.Scope.Agent = "b"
	for i := 0; i < 3; i++ {
		if _, err := q.Generate(ctx, other); err != nil {
			t.Fatalf("agent b: %v", err)
		}
	}
	// The window slides: spends older than an hour no longer count.
	c.add(time.Hour)
	if _, err := q.Generate(ctx, ask("q")); err != nil {
		t.Fatalf("after the window: %v", err)
	}
}

func TestQuotasChargeNoFailedCall(t *testing.T) {
	fail := true
	m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) {
		if fail {
			return llm.Response{}, &llm.APIError{StatusCode: 500}
		}
		return answer("ok"), nil
	}}
	q := gateway.Quotas([]gateway.Quota{{Scope: "agent:*", Tokens: 15, Window: time.Hour}}, nil)(m)
	for i := 0; i < 5; i++ {
		if _, err := q.Generate(context.Background(), ask("q")); errors.Is(err, gateway.ErrQuotaExceeded) {
			t.Fatalf("call %d: a failed call was charged: %v", i, err)
		}
	}
	fail = false
	if _, err := q.Generate(context.Background(), ask("q")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Generate(context.Background(), ask("q")); !errors.Is(err, gateway.ErrQuotaExceeded) {
		t.Fatalf("15 of 15 tokens spent must refuse: %v", err)
	}
}

func TestQuotasOfEveryScopeApply(t *testing.T) {
	quotas := []gateway.Quota{
		{Scope: "team:red", Tokens: 30, Window: time.Hour},
		{Scope: "key:k1", Tokens: 15, Window: time.Hour},
	}
	m := answering("m", "ok")
	q := gateway.Quotas(quotas, nil)(m)
	ctx := context.Background()
	req := func(agent, team, key string) llm.Request {
		r := ask("q")
		r.Scope = llm.Scope{Agent: agent, Team: team, Key: key}
		return r
	}
	if _, err := q.Generate(ctx, req("a", "red", "k1")); err != nil {
		t.Fatal(err)
	}
	// k1 is spent (15 of 15), whatever the agent or team.
	if _, err := q.Generate(ctx, req("b", "blue", "k1")); !errors.Is(err, gateway.ErrQuotaExceeded) || !strings.Contains(err.Error(), "key:k1") {
		t.Fatalf("key quota: %v", err)
	}
	if _, err := q.Generate(ctx, req("b", "red", "k2")); err != nil {
		t.Fatalf("team red has 15 of 30 left: %v", err)
	}
	if _, err := q.Generate(ctx, req("c", "red", "")); !errors.Is(err, gateway.ErrQuotaExceeded) || !strings.Contains(err.Error(), "team:red: 30 of 30") {
		t.Fatalf("team quota: %v", err)
	}
	if _, err := q.Generate(ctx, req("c", "", "")); err != nil {
		t.Fatalf("a call of no team and no key is not limited: %v", err)
	}
	if gateway.Quotas(nil, nil)(m) != llm.Model(m) {
		t.Fatal("no quotas must leave the model unwrapped")
	}
}

// Two quotas that apply to one agent ("agent:*" and "agent:a") each count its spend
// once, over their own window: neither doubles the other's spend nor forgets spends
// that the other's shorter window no longer counts.
func TestQuotasOfOneScopeKeepTheirOwnWindows(t *testing.T) {
	c := &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	m := answering("m", "ok") // 15 tokens a call
	q := gateway.Quotas([]gateway.Quota{
		{Scope: "agent:*", Tokens: 40, Window: time.Hour},
		{Scope: "agent:a", Tokens: 1000, Window: time.Minute},
	}, c.Now)(m)
	ctx := context.Background()
	for i := 0; i < 3; i++ { // 0, 15, 30 tokens used of the hourly 40
		if _, err := q.Generate(ctx, ask("q")); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		c.add(2 * time.Minute) // past the minute window, well inside the hour
	}
	_, err := q.Generate(ctx, ask("q"))
	if !errors.Is(err, gateway.ErrQuotaExceeded) || !strings.Contains(err.Error(), "agent:a: 45 of 40 tokens used in the last 1h0m0s") {
		t.Fatalf("err %v: want the hourly quota to count each of the 3 calls once", err)
	}
}
