package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A configuration's stream holds the configuration of its digest, which every
// session whose tasks name the digest folds. An export whose configuration was
// changed under its digest is refused, and nothing is written: before, import
// stored it, and a task of any session of the log that named the digest (a node
// running that configuration later writes the same event, which the log keeps
// once) was re-decided, forked and resumed with the changed one. A configuration
// whose secrets were redacted as it was recorded cannot be checked against its
// digest, and still imports.
func TestImportRefusesAConfigurationChangedUnderItsDigest(t *testing.T) {
	src, _, file, b := exportedSession(t)
	if !bytes.Contains(b, []byte(node.DefaultSystemPrompt)) {
		t.Fatalf("the export holds no configuration with the default prompt:\n%s", b)
	}
	changed := bytes.Replace(b, []byte(node.DefaultSystemPrompt), []byte("Answer every question with 42."), 1)
	if err := os.WriteFile(file, changed, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	code, out, errs := replay(t, "import", file, "--data", dir)
	if code != 1 || out != "" || !strings.Contains(errs, "config/") || !strings.Contains(errs, "digest") {
		t.Errorf("import: exit %d, stdout %q, stderr %q; want exit 1 and an error naming the configuration and its digest", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "events.db")); err == nil {
		if got := readAll(t, dir); len(got) != 0 {
			t.Errorf("the log holds %d streams after a refused import", len(got))
		}
	}

	// A prompt with a secret: the configuration is stored redacted.
	const secret = "sk-proj-Zq8vN3xT5rL2mK9wY4bH7cJ1dF6gA0sE"
	src = t.TempDir()
	n, stop := nodetest.StartWithStop(t, node.Config{DataDir: src, SystemPrompt: "Deploy with the key " + secret + " only.", Secrets: []string{secret}})
	sid := fmt.Sprintf("rec-%d", time.Now().UnixNano())
	nodetest.Run(t, n, sid, "What is 2 + 2?")
	stop()
	if code, _, errs := replay(t, "export", sid, "--data", src, "--out", file); code != 0 {
		t.Fatal(errs)
	}
	if b, err := os.ReadFile(file); err != nil || !bytes.Contains(b, []byte("[REDACTED]")) || bytes.Contains(b, []byte(secret)) {
		t.Fatalf("export of a prompt with a secret: %v\n%s", err, b)
	}
	if code, out, errs := replay(t, "import", file, "--data", t.TempDir()); code != 0 {
		t.Errorf("import of a redacted configuration: exit %d, %q, %q", code, out, errs)
	}
}

// A configuration that is not its digest's imports only as one whose system
// prompt was redacted as it was recorded: a task runs under such a one only
// with its secrets put back into a configuration of that digest, never as it
// is. A redaction marker anywhere else in the event (another field of the
// configuration, a field no configuration has) made the import take a changed
// prompt as a redacted one: a task naming the digest then ran under it.
func TestImportRefusesAChangedConfigurationMarkedRedactedElsewhere(t *testing.T) {
	_, _, file, b := exportedSession(t)
	// The configuration's line, its prompt changed.
	at := bytes.Index(b, []byte(`"type":"config.recorded"`))
	if at < 0 || !bytes.Contains(b[at:], []byte(node.DefaultSystemPrompt)) {
		t.Fatalf("the export holds no configuration with the default prompt:\n%s", b)
	}
	start := bytes.LastIndexByte(b[:at], '\n') + 1
	session, config := b[:start], bytes.Replace(b[start:], []byte(node.DefaultSystemPrompt), []byte("Answer every question with 42."), 1)
	for name, marked := range map[string][]byte{
		"a field no configuration has": bytes.Replace(config, []byte(`"payload":{"digest"`), []byte(`"payload":{"note":"[REDACTED]","digest"`), 1),
		"its model":                    bytes.Replace(config, []byte(`"model":"offline"`), []byte(`"model":"[REDACTED]"`), 1),
		"a tool's name":                bytes.Replace(config, []byte(`"tools":["`), []byte(`"tools":["[REDACTED]","`), 1),
	} {
		if bytes.Equal(marked, config) {
			t.Fatalf("%s: the configuration has no such place:\n%s", name, config)
		}
		marked = append(slices.Clip(session), marked...)
		if err := os.WriteFile(file, marked, 0o600); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		code, out, errs := replay(t, "import", file, "--data", dir)
		if code != 1 || out != "" || !strings.Contains(errs, "config/") || !strings.Contains(errs, "digest") {
			t.Errorf("marker in %s: import: exit %d, stdout %q, stderr %q; want exit 1 and an error naming the configuration and its digest", name, code, out, errs)
		}
		if _, err := os.Stat(filepath.Join(dir, "events.db")); err == nil {
			if got := readAll(t, dir); len(got) != 0 {
				t.Errorf("marker in %s: the log holds %d streams after a refused import", name, len(got))
			}
		}
	}
}
