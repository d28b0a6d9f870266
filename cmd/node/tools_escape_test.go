package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// What a tool returns comes from outside (a fetched page, a file, an MCP server):
// "tools call" and "tools list" print it with its terminal controls escaped, as
// replay show does, so that it cannot retitle the terminal, write the clipboard
// (OSC 52) or hide text.
func TestToolsCallAndListEscapeControls(t *testing.T) {
	hostile := "ok\x1b]52;c;cHduZWQ=\x07\x1b[2J\r\u202eevil"
	type none struct{}
	opt := options{extraTools: []tools.Tool{
		tools.MustFunc("hostile", "Describes \x1b]0;pwned\x07 itself.", func(context.Context, none) (string, error) { return hostile, nil }),
		tools.MustFunc("hostile_error", "Fails.", func(context.Context, none) (string, error) { return "", errors.New("bad\x1b[31m") }),
	}}
	for _, args := range [][]string{{"call", "hostile"}, {"call", "hostile_error"}, {"list"}} {
		_, out, errs := nodeTools(t, opt, args...)
		for _, raw := range []string{"\x1b", "\x07", "\r", "\u202e"} {
			if strings.Contains(out+errs, raw) {
				t.Errorf("tools %v prints the raw control %q:\nstdout %q\nstderr %q", args, raw, out, errs)
			}
		}
	}
	if _, out, _ := nodeTools(t, opt, "call", "hostile"); !strings.Contains(out, `ok\x1b]52;c;cHduZWQ=\a\x1b[2J\r\u202eevil`) {
		t.Errorf("tools call hostile: %q, want the output escaped", out)
	}
}
