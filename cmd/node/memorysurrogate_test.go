package main

import (
	"os"
	"strings"
	"testing"
)

// node memory add --metadata with a \u escape of half a UTF-16 surrogate pair is
// refused, as POST /v1/memories refuses it, naming the escape: stored, it was
// U+FFFD, another text than the one given. Nothing is opened or written. The
// escapes of a whole pair are the character they encode.
func TestMemoryCLIAddMetadataLoneSurrogate(t *testing.T) {
	data := memoryCLIEnv(t)
	for _, meta := range []string{`{"mood":"smile \ud83d"}`, `{"\udc00":1}`} {
		code, out, errs := nodeMemory(t, "add", "--data", data, "--namespace", "user:alice", "--metadata", meta, "Alice smiled")
		want := meta[strings.Index(meta, `\u`) : strings.Index(meta, `\u`)+6]
		if code != 2 || out != "" || !strings.Contains(errs, want) || !strings.Contains(errs, "surrogate") {
			t.Errorf("node memory add --metadata %s: exit %d\nstdout %s\nstderr %s\nwant exit 2 naming %s", meta, code, out, errs, want)
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("a refused add created the data directory: %v", err)
	}
	mustMemory(t, "add", "--data", data, "--namespace", "user:alice", "--metadata", `{"mood":"smile \ud83d\ude00"}`, "Alice smiled")
	events := memoryEvents(t, data, "user:alice")
	if len(events) != 1 || !strings.Contains(string(events[0].Payload), "😀") && !strings.Contains(string(events[0].Payload), `\ud83d\ude00`) {
		t.Fatalf("the namespace holds %d events; want one whose metadata has the emoji", len(events))
	}
}
