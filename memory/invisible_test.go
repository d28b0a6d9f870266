package memory_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/memory"
)

// Content made only of the characters that show nothing (a zero width space, a
// byte order mark, a soft hyphen: a form field holding one pasted in) is empty, as
// whitespace is: the exact-duplicate hash reads it as "", so two such memories were
// one, and no search could find it. It is refused, and the write after a task drops
// such a fact rather than fail on it.
func TestInvisibleOnlyContentIsEmpty(t *testing.T) {
	const blank = "\u200b \ufeff\u00ad\u2060"
	body := `{"namespace":"user:a","tier":"semantic","content":"` + blank + `"}`
	if _, err := memory.DecodeInputs([]byte(body)); !errors.Is(err, memory.ErrInvalid) || !strings.Contains(err.Error(), "empty content") {
		t.Errorf("DecodeInputs: %v; want empty content", err)
	}
	f := newFixture(t)
	ns := f.ns(t, "user:alice")
	if _, err := ns.Add(testCtx(t), "k1", []memory.AddRequest{{Tier: memory.Semantic, Content: blank}}); !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("Add of %q: %v; want ErrInvalid", blank, err)
	}
	res := add(t, ns, "k2", memory.AddRequest{Tier: memory.Semantic, Content: "Alice likes tea"})
	empty := blank
	if _, err := ns.Update(testCtx(t), "k3", res[0].ID, memory.UpdateRequest{Content: &empty}); !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("Update to %q: %v; want ErrInvalid", blank, err)
	}
	if len(ns.Snapshot()) != 1 {
		t.Errorf("snapshot: %+v", ns.Snapshot())
	}
	facts, err := memory.ParseFacts(`[{"content": "` + blank + `"}, {"content": "Alice likes tea"}]`)
	if err != nil || len(facts) != 1 || facts[0].Content != "Alice likes tea" {
		t.Errorf("ParseFacts: %+v, %v; want the one visible fact", facts, err)
	}
}
