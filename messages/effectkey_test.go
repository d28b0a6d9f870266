package messages_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

func TestEffectKeyRoundTrip(t *testing.T) {
	for _, k := range []messages.EffectKey{
		{SessionID: "s", Seq: 1},
		{SessionID: "s-1", Seq: 42},
		{SessionID: "task.0f3a:b_c-d", Seq: 18446744073709551615},
	} {
		text := k.String()
		back, err := messages.ParseEffectKey(text)
		if err != nil || back != k {
			t.Errorf("ParseEffectKey(%q) = %+v, %v; want %+v", text, back, err, k)
		}
		if !k.Valid() {
			t.Errorf("%+v: not Valid", k)
		}
		b, err := json.Marshal(struct {
			K messages.EffectKey `json:"k"`
		}{k})
		if err != nil || string(b) != `{"k":"`+text+`"}` {
			t.Errorf("JSON of %+v: %s, %v", k, b, err)
		}
		var got struct {
			K messages.EffectKey `json:"k"`
		}
		if err := json.Unmarshal(b, &got); err != nil || got.K != k {
			t.Errorf("JSON round trip of %+v: %+v, %v", k, got.K, err)
		}
	}
	if s := (messages.EffectKey{}).String(); s != "" {
		t.Errorf("zero key prints %q", s)
	}
	if (messages.EffectKey{SessionID: "s"}).Valid() || (messages.EffectKey{Seq: 1}).Valid() || (messages.EffectKey{}).Valid() {
		t.Error("a key without session or seq is Valid")
	}
}

func TestParseEffectKeyRejectsHostileInput(t *testing.T) {
	for _, s := range []string{
		"", "/", "s", "s/", "/1", "//1", "s/0", "s/01", "s/+1", "s/-1", "s/1x", "s/x1", "s/ 1", "s/1 ",
		"a/b/7", "s/0x10", "s/1e3", "s/1.0", "s/١", // Arabic-Indic digit one
		"s/18446744073709551616", "s/99999999999999999999999",
		"s 1/1", "s\x00/1", "s\n/1", "\xff/1", "sé/1",
		strings.Repeat("a", 600) + "/1",
	} {
		k, err := messages.ParseEffectKey(s)
		if err == nil {
			t.Errorf("ParseEffectKey(%q) = %+v, want an error", s, k)
			continue
		}
		if !errors.Is(err, messages.ErrBadEffectKey) {
			t.Errorf("ParseEffectKey(%q): %v does not wrap ErrBadEffectKey", s, err)
		}
	}
	var k messages.EffectKey
	if err := json.Unmarshal([]byte(`"s/00"`), &k); err == nil {
		t.Errorf("JSON key s/00 decoded to %+v", k)
	}
}

// FuzzParseEffectKey: whatever the input, ParseEffectKey either fails or returns a
// key whose text is exactly the input.
func FuzzParseEffectKey(f *testing.F) {
	for _, s := range []string{"s/1", "a/b/2", "//1", "s/0", "s/", "/1", "x/18446744073709551615", "x/18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := messages.ParseEffectKey(s)
		if err != nil {
			return
		}
		if k.String() != s || !k.Valid() {
			t.Fatalf("ParseEffectKey(%q) = %+v, which prints %q", s, k, k.String())
		}
	})
}

// TestParseEffectKeyOfANonKeyIsCheap: an ID without a '/' (a task's UUID, which the
// ingress checks is no key) is refused with one allocation and no formatting, with
// the error text it always had.
func TestParseEffectKeyOfANonKeyIsCheap(t *testing.T) {
	id := "01a24ea4-51d2-7afb-92f7-0257bc59f085"
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := messages.ParseEffectKey(id); err == nil {
			t.Fatal("a UUID parsed as a key")
		}
	})
	if allocs > 1 {
		t.Errorf("ParseEffectKey of a UUID: %v allocations, want at most 1", allocs)
	}
	_, err := messages.ParseEffectKey(id)
	want := `messages: malformed effect key: "01a24ea4-51d2-7afb-92f7-0257bc59f085" has no '/' between session and seq`
	if err.Error() != want || !errors.Is(err, messages.ErrBadEffectKey) {
		t.Errorf("error %q (wraps ErrBadEffectKey: %v), want %q", err, errors.Is(err, messages.ErrBadEffectKey), want)
	}
}

// An effect's name outside the log is the same for the same key, task and time (a
// call performed again reads them from the log), another when any differs (another
// log's session of the same name reaches the same seq at another time, in another
// task), at most 39 bytes whatever the key's length, and travels in an
// EffectRequest to the node that performs the call.
func TestEffectKeyOutward(t *testing.T) {
	k := messages.EffectKey{SessionID: "support", Seq: 4}
	name := k.Outward("task-1", 1_700_000_000_000_000)
	if !strings.HasPrefix(name, "troupe-") || len(name) != 39 || name != k.Outward("task-1", 1_700_000_000_000_000) {
		t.Fatalf("outward name %q", name)
	}
	for _, other := range []string{
		k.Outward("task-1", 1_700_000_000_000_001),
		k.Outward("task-2", 1_700_000_000_000_000),
		messages.EffectKey{SessionID: "support", Seq: 5}.Outward("task-1", 1_700_000_000_000_000),
	} {
		if other == name {
			t.Errorf("another call has the outward name %q", name)
		}
	}
	if got := (messages.EffectKey{}).Outward("task-1", 1); got != "" {
		t.Errorf("the zero key's outward name %q", got)
	}
	if long := (messages.EffectKey{SessionID: strings.Repeat("s", 128), Seq: 1<<64 - 1}).Outward("t", 1); len(long) != 39 {
		t.Errorf("a long key's outward name is %d bytes", len(long))
	}
	req := messages.EffectRequest{SessionID: "support", Key: k, ReplyTopic: messages.TopicReplies, ReplyNode: "n1", Outward: name,
		Tool: &messages.ToolCallRequested{Key: k.String(), CallID: "c1", Tool: "a2a__b", Arguments: "{}"}}
	b, err := messages.EncodeCommand(&req)
	if err != nil {
		t.Fatal(err)
	}
	back, err := messages.DecodeEffectRequest(b)
	if err != nil || back.Outward != name {
		t.Fatalf("decoded %+v, %v", back, err)
	}
}

// An effect's name outside the log is made for every effect a session issues: it
// allocates the string it returns and nothing else, and is the digest of the key,
// the task and the time as written (the name of a call in flight does not change
// with the build that performs it again).
func TestEffectKeyOutwardAllocatesOnlyItsName(t *testing.T) {
	k := messages.EffectKey{SessionID: "support-" + strings.Repeat("x", 40), Seq: 1234}
	task := "ctx-0123456789abcdef~0123456789abcdef0123456789abcdef"
	const ts = 1_767_225_600_123_456
	for _, k := range []messages.EffectKey{k, {SessionID: strings.Repeat("s", 300), Seq: 1<<64 - 1}} {
		sum := sha256.Sum256([]byte(k.String() + "\x00" + task + "\x00" + strconv.FormatInt(ts, 10)))
		if got, want := k.Outward(task, ts), "troupe-"+hex.EncodeToString(sum[:16]); got != want {
			t.Fatalf("outward name of %s: %q, want %q", k, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = k.Outward(task, ts) }); n > 1 {
		t.Errorf("Outward allocates %v times, want 1 (its name)", n)
	}
}
