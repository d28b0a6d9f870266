package memory_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// Text typed with an East Asian input method in its full-width mode
// ("ｉＰｈｏｎｅ", "Ｃａｒｏｌ　ｌｉｋｅｓ　ｔｅａ", the ideographic space between
// words) reads as the same letters: a memory is found by its words typed either
// way, by every mode, and the same fact written in either width is the stored one,
// not a second memory.
func TestSearchAndDedupeReadFullWidthLettersAsTheirASCII(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	ns := f.ns(t, "user:kana")
	res := add(t, ns, "k1",
		memory.AddRequest{Tier: memory.Semantic, Content: "Ｋｅｎｊｉ\u3000ｏｗｎｓ\u3000ａｎ\u3000ｉＰｈｏｎｅ\u3000１５"},
		memory.AddRequest{Tier: memory.Semantic, Content: "Yuki prefers green tea"},
		memory.AddRequest{Tier: memory.Semantic, Content: "Bob drives a red Toyota"},
	)
	for _, mode := range []string{memory.ModeHybrid, memory.ModeKeyword, memory.ModeVector} {
		for _, c := range []struct {
			query, want string
		}{
			{"Kenji iPhone", res[0].ID},
			{"ｇｒｅｅｎ\u3000ｔｅａ", res[1].ID},
		} {
			rs, err := ns.Search(ctx, memory.Query{Text: c.query, Mode: mode, Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) == 0 || rs[0].Memory.ID != c.want {
				var got []string
				for _, r := range rs {
					got = append(got, r.Memory.Content)
				}
				t.Errorf("%s search %+q: %q, want %s first", mode, c.query, got, c.want)
			}
		}
	}
	again := add(t, ns, "k2", memory.AddRequest{Tier: memory.Semantic, Content: "Ｙｕｋｉ　ｐｒｅｆｅｒｓ　ｇｒｅｅｎ　ｔｅａ"})
	if again[0] != (memory.AddResult{ID: res[1].ID, Event: "NONE"}) {
		t.Errorf("the full-width fact: %v, want the stored %s", again, res[1].ID)
	}
	if n := len(events(t, f.log, "user:kana")); n != 3 {
		t.Errorf("%d events, want the three memories added", n)
	}
}

// A full-width memory an older build stored keeps the hash that build gave it (of
// its full-width text): it is read with the hash of its text now, so that the same
// fact written in ASCII is its exact duplicate, not a second memory.
func TestFullWidthMemoryStoredBeforeIsTheDuplicateOfItsASCII(t *testing.T) {
	f := newFixture(t)
	const stored = "Ｙｕｋｉ　ｐｒｅｆｅｒｓ　ｇｒｅｅｎ　ｔｅａ"
	old := sha256.Sum256([]byte(strings.Join(strings.Fields(strings.ToLower(stored)), " "))) // as builds that did not narrow hashed it
	recorded(t, f.log, memory.Stream("user:kana"), t0,
		&messages.MemoryAdded{Reason: "added", Memory: messages.MemoryRecord{MemoryID: "m_1", Tier: "semantic", Content: stored,
			Importance: 0.5, AtUS: t0.UnixMicro(), Hash: hex.EncodeToString(old[:])}})
	ns := f.ns(t, "user:kana")
	added := add(t, ns, "again", memory.AddRequest{Tier: memory.Semantic, Content: "Yuki prefers green tea"})
	if len(added) != 1 || added[0].Event != memory.EventNone || added[0].ID != "m_1" {
		t.Errorf("the same fact written now in ASCII: %+v, want NONE with m_1", added)
	}
}
