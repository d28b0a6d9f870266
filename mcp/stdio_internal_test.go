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
