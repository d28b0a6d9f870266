package cjk

import (
	"slices"
	"testing"
)

func TestAppendPairs(t *testing.T) {
	for _, c := range []struct {
		run  string
		want []string
	}{
		{"", nil},
		{"天", []string{"天"}},
		{"東京都", []string{"東京", "京都"}},
		{"날씨예보", []string{"날씨", "씨예", "예보"}},
	} {
		if got := AppendPairs(nil, []rune(c.run)); !slices.Equal(got, c.want) {
			t.Errorf("AppendPairs(%q) = %q, want %q", c.run, got, c.want)
		}
	}
}

func TestIsAndASCII(t *testing.T) {
	for _, r := range "天ひカ한" {
		if !Is(r) {
			t.Errorf("Is(%q) = false", r)
		}
	}
	for _, r := range "aZ9é，" {
		if Is(r) {
			t.Errorf("Is(%q) = true", r)
		}
	}
	if got := string([]rune{ASCII('Ｗ'), ASCII('４'), ASCII('！'), ASCII('天'), ASCII('a')}); got != "W4!天a" {
		t.Errorf("ASCII gave %q", got)
	}
}

func TestNarrow(t *testing.T) {
	for in, want := range map[string]string{
		"":                    "",
		"plain text, café 東京": "plain text, café 東京",
		"Ｋｅｎｊｉ\u3000ｉＰｈｏｎｅ１５！": "Kenji iPhone15!",
		"～｀＠ｚ":           "~`@z",
		"\uff00\uff5f￥ｱ": "\uff00\uff5f￥ｱ", // outside U+FF01–FF5E: kept
	} {
		if got := Narrow(in); got != want {
			t.Errorf("Narrow(%q) = %q, want %q", in, got, want)
		}
		if got := HasFullwidth(in); got != (Narrow(in) != in) {
			t.Errorf("HasFullwidth(%q) = %v", in, got)
		}
	}
	for r := rune(0x2F00); r <= 0xFFFF; r++ {
		s := "a" + string(r) + "b"
		if HasFullwidth(s) != (r == 0x3000 || 0xFF01 <= r && r <= 0xFF5E) {
			t.Fatalf("HasFullwidth(%q) = %v", s, HasFullwidth(s))
		}
	}
}
