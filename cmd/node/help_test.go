package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestHelpIsAnsweredOnStdoutWithExitZero: asking any command for its usage (-h,
// --help, help) prints it on stdout and exits 0, as node memory --help and node rag
// --help did already (so that node serve --help | less shows it); a flag that does
// not exist is still an error on stderr, exit 2.
func TestHelpIsAnsweredOnStdoutWithExitZero(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"serve", "--help"}, {"run", "-h"}, {"mcp", "-help"},
		{"tools", "--help"}, {"tools", "list", "--help"}, {"tools", "call", "-h"}, {"memory", "--help"}, {"memory", "add", "--help"},
		{"rag", "--help"}, {"rag", "search", "-h"}, {"agents", "--help"}, {"agents", "list", "--help"}} {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, &out, &errb, options{})
		if code != 0 || !strings.Contains(out.String(), "usage") || errb.Len() != 0 {
			t.Errorf("node %s: exit %d, stdout %q…, stderr %q…", strings.Join(args, " "), code, head(out.String()), head(errb.String()))
		}
	}
	for _, args := range [][]string{{"serve", "--bogus"}, {"tools", "list", "--bogus"}, {"memory", "add", "--bogus"}, {"bogus"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb, options{}); code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), "usage") {
			t.Errorf("node %s: exit %d, stdout %q…, stderr %q…", strings.Join(args, " "), code, head(out.String()), head(errb.String()))
		}
	}
}

func head(s string) string { return s[:min(len(s), 60)] }
