package redact_test

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/redact"
)

// The handler redacts the message and every value: strings, errors, other values
// (as they print), in groups and in WithAttrs; a record holding no secret passes
// as it was.
func TestHandlerRedactsEveryValue(t *testing.T) {
	const secret = "plain-secret-Q7Z9X2W4V6"
	var buf bytes.Buffer
	log := slog.New(redact.NewHandler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), redact.New(secret)))
	log = log.With("with", "w "+secret)
	log.WithGroup("g").Debug("message "+secret, "s", secret, "err", errors.New("dial "+secret),
		"list", []string{"a", secret}, slog.Group("inner", "x", secret), "n", 3, "words", []string{"no", "secret"})
	out := buf.String()
	if strings.Contains(out, secret) {
		t.Fatalf("the line holds the secret:\n%s", out)
	}
	for _, want := range []string{`msg="message [REDACTED]"`, `with="w [REDACTED]"`, `g.s=[REDACTED]`, `g.err="dial [REDACTED]"`,
		`g.list="[a [REDACTED]]"`, `g.inner.x=[REDACTED]`, `g.n=3`, `g.words="[no secret]"`} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in:\n%s", want, out)
		}
	}
}

// A URL's password and its secret-named query values are its secrets, in the form
// they take in the URL too; other text and parameters are not.
func TestURLSecrets(t *testing.T) {
	for in, want := range map[string][]string{
		"https://u:pa%2Fss-word@h/mcp?api_key=k1&region=eu": {"pa/ss-word", "pa%2Fss-word", "k1"},
		"postgres://app:dbpass@db/app":                      {"dbpass"},
		"https://h/x?sig=abc&access_token=t+1":              {"abc", "t 1", "t+1"},
		"https://h/x?region=eu":                             nil,
		"production":                                        nil,
		"https://user@h/":                                   nil,
	} {
		got := redact.URLSecrets(in)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("URLSecrets(%q) = %q, want %q", in, got, want)
		}
	}
}

// URL replaces a URL's password and secret-named query values, short ones too, and
// leaves the rest as written.
func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://u:pw@h:8443/hook?token=abc&x=1#f": "https://u:[REDACTED]@h:8443/hook?token=[REDACTED]&x=1#f",
		"https://h/hook?Signature=s&api%5Fkey=k":   "https://h/hook?Signature=[REDACTED]&api%5Fkey=[REDACTED]",
		"https://user@h/hook?region=eu":            "https://user@h/hook?region=eu",
		"not a url":                                "not a url",
	} {
		if got := redact.URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

// URLs replaces the credentials of every URL in a text, as URL does, and leaves
// the rest of the text as written.
func TestURLs(t *testing.T) {
	for in, want := range map[string]string{
		`Post "http://a:***@h:1/mcp?api_key=k1&page=2": dial tcp h:1: refused`: `Post "http://a:[REDACTED]@h:1/mcp?api_key=[REDACTED]&page=2": dial tcp h:1: refused`,
		`from https://h/x?token=t to wss://u:pw@h/y?sig=s\"; done`:             `from https://h/x?token=[REDACTED] to wss://u:[REDACTED]@h/y?sig=[REDACTED]\"; done`,
		`see <https://h/doc?region=eu> or ://odd`:                              `see <https://h/doc?region=eu> or ://odd`,
		"no url here": "no url here",
	} {
		if got := redact.URLs(in); got != want {
			t.Errorf("URLs(%q) = %q, want %q", in, got, want)
		}
	}
}
