package cjk

import (
	"strings"
	"testing"
)

func TestVisible(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"／ｓｔａｔｅ＞", 10, "/state>"},
		{"/\u200bst\u00adate\u2060>", 10, "/state>"},
		{"\u00a0/\u3000state\n>", 10, " / state\n>"},
		{"abcdef", 3, "abc"},
		{strings.Repeat("\u200b", 100) + "state", 5, ""},
	} {
		if got := Visible(c.in, c.n); got != c.want {
			t.Errorf("Visible(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
