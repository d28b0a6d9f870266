package main

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

// Import stores a payload as the file holds it but for the whitespace between
// its tokens and the escapes a node writes ('<', '>' and '&' as \u003c, …): a
// normal export imports byte for byte, and in a rewritten one numbers keep
// their text (1e400, 1.0, -0.0, integers beyond 2^53), keys their order, a key
// written twice both its values, and strings their escapes.
func TestImportKeepsPayloadsButForTheirSpacing(t *testing.T) {
	src := t.TempDir()
	id := recordSession(t, src, "What is 12 * (7 + 5)?")
	file := t.TempDir() + "/s.jsonl"
	if code, _, errs := replay(t, "export", id, "--data", src, "--out", file); code != 0 {
		t.Fatal(errs)
	}
	dir := t.TempDir()
	if code, _, errs := replay(t, "import", file, "--data", dir); code != 0 {
		t.Fatal(errs)
	}
	if got, want := readAll(t, dir)[id], readAll(t, src)[id]; !reflect.DeepEqual(got, want) {
		t.Fatalf("import of an export: %d events, not the %d recorded byte for byte", len(got), len(want))
	}

	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	var first map[string]json.RawMessage
	if err := json.Unmarshal(lines[1], &first); err != nil || !bytes.HasPrefix(first["payload"], []byte("{")) {
		t.Fatalf("line 2 of the export: %v, payload %s", err, first["payload"])
	}
	const extra = `{ "big" : 123456789012345678901234567890, "huge": 1e400, "one": 1.0, "zero": -0.0, "exp": 1E+2, ` +
		`"dup": 1, "dup": "two", "html": "<a href=\"x\">&amp;</a>", "esc": "\u00e9\/\t", "list": [ 1.50 , { "b": 1, "a": 2 } ], `
	spaced := append([]byte(extra), first["payload"][1:]...)
	var want bytes.Buffer
	if err := json.Compact(&want, spaced); err != nil {
		t.Fatal(err)
	}
	wantPayload := strings.NewReplacer("<", `\u003c`, ">", `\u003e`, "&", `\u0026`).Replace(want.String())
	lines[1] = bytes.Replace(lines[1], first["payload"], spaced, 1)
	if err := os.WriteFile(file, bytes.Join(lines, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	if code, _, errs := replay(t, "import", file, "--data", dir); code != 0 {
		t.Fatal(errs)
	}
	got := readAll(t, dir)[id]
	if len(got) == 0 || string(got[0].Payload) != wantPayload {
		t.Fatalf("stored payload of seq 1:\n%s\nwant the file's without its spaces:\n%s", got[0].Payload, wantPayload)
	}
}
