package mcp

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/iotest"
)

// jsonLines passes a server's JSON-RPC messages whole (over several lines, with
// braces, brackets and quotes in their strings, in batches) and skips the lines
// around them that are not JSON.
func TestJSONLinesSkipsWhatIsNotJSON(t *testing.T) {
	in := "Server running on stdio\n" +
		`{"jsonrpc":"2.0","id":1,"result":{"text":"a } ] \" \\\" {\n[INFO] x"}}` + "\n" +
		"[INFO] listening\n" +
		"{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"notifications/x\"\n}\n" +
		"  42\n\n" +
		`[ {"jsonrpc":"2.0","id":2,"result":{}} ]` + "\n" +
		"[]\n" +
		"done"
	want := `{"jsonrpc":"2.0","id":1,"result":{"text":"a } ] \" \\\" {\n[INFO] x"}}` + "\n" +
		"{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"notifications/x\"\n}\n" +
		"  \n" + // the white space before 42, harmless
		`[ {"jsonrpc":"2.0","id":2,"result":{}} ]` + "\n" +
		"[]\n"
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, r := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader} {
		logged.Reset()
		j := &jsonLines{r: bufio.NewReaderSize(r(strings.NewReader(in)), 16), log: log}
		got, err := io.ReadAll(j)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("passed\n%s\nwant\n%s", got, want)
		}
		for _, line := range []string{`level=WARN msg="mcp server wrote a line that is not JSON-RPC on its stdout; skipped" line="Server running on stdio"`,
			`level=DEBUG msg="mcp server wrote a line that is not JSON-RPC on its stdout; skipped" line="[INFO] listening"`, `line=42`, `line=done`} {
			if !strings.Contains(logged.String(), line) {
				t.Errorf("the log lacks %s:\n%s", line, logged.String())
			}
		}
	}
}

// A value longer than the limit is not passed on: a response becomes an error
// response to its id, wherever the id is written; anything else is dropped.
func TestJSONLinesReplacesAnAnswerLongerThanTheLimit(t *testing.T) {
	long := strings.Repeat("a", 100)
	in := `{"result":{"text":"` + long + `","id":7},"jsonrpc":"2.0","id" : "x\"1"}` + "\n" +
		`{"jsonrpc":"2.0","id":8,"result":{"text":"` + long + `"}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"id":9,"data":"` + long + `"}}` + "\n" +
		`{"jsonrpc":"2.0","id":10,"result":{}}` + "\n"
	var logged bytes.Buffer
	j := &jsonLines{r: bufio.NewReader(strings.NewReader(in)), log: slog.New(slog.NewTextHandler(&logged, nil)), limit: 64}
	got, err := io.ReadAll(j)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"error":{"code":-32603,"message":"the server's answer is 159 bytes, larger than 64, the most the node reads of one message"},"id":"x\"1","jsonrpc":"2.0"}` + "\n\n" +
		`{"error":{"code":-32603,"message":"the server's answer is 145 bytes, larger than 64, the most the node reads of one message"},"id":8,"jsonrpc":"2.0"}` + "\n\n" +
		"\n" + `{"jsonrpc":"2.0","id":10,"result":{}}` + "\n"
	if string(got) != want {
		t.Errorf("passed\n%s\nwant\n%s", got, want)
	}
	if !strings.Contains(logged.String(), "larger than the node reads of one; dropped") {
		t.Errorf("the dropped notification is not logged:\n%s", logged.String())
	}
}

// A result of 10 MiB, mostly one string, through jsonLines: its strings' plain
// runs are taken at once, not a byte at a time (a byte at a time, 10 MiB took
// 0.25 s, and more than 20 s under the race detector on a busy machine, past a
// tool's timeout).
func BenchmarkJSONLinesBigResult(b *testing.B) {
	msg := `{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 10<<20) + `"}]}}` + "\n"
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		j := &jsonLines{r: bufio.NewReaderSize(strings.NewReader(msg), 64<<10), log: log, limit: 64 << 20}
		if n, err := io.Copy(io.Discard, j); err != nil || n != int64(len(msg)) {
			b.Fatalf("passed %d bytes of %d: %v", n, len(msg), err)
		}
	}
}
