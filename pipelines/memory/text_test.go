package memory

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTokenize(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"english", "The cats are running quickly!", []string{"cat", "run", "quickly"}},
		{"punctuation", "hello,world...foo-bar (baz) [qux]", []string{"hello", "world", "foo", "bar", "baz", "qux"}},
		{"apostrophes", "Alice's dog don't bark", []string{"alic", "dog", "bark"}}, // alice → alic: a final e goes from words of five letters or more
		{"curly apostrophe", "Bob’s car", []string{"bob", "car"}},
		{"numbers", "version 3.14 released in 2024", []string{"version", "3", "14", "releas", "2024"}},
		{"stopwords only", "the and of it is", nil},
		{"empty", "", nil},
		{"accents", "Café Müller ÉCOLE naïve", []string{"café", "müller", "école", "naïve"}},
		{"decomposed accents are the composed letters", "Cafe\u0301 Mu\u0308ller E\u0301COLE", []string{"café", "müller", "école"}},
		{"cyrillic", "Привет, Мир", []string{"привет", "мир"}},
		{"greek", "Καλημέρα κόσμε", []string{"καλημέρα", "κόσμε"}},
		{"CJK bigrams", "東京都", []string{"東京", "京都"}},
		{"CJK single", "猫", []string{"猫"}},
		{"CJK in English", "I love 東京 and sushi", []string{"love", "東京", "sushi"}},
		{"CJK against Latin", "abc東京def", []string{"abc", "東京", "def"}},
		{"japanese", "東京に住む", []string{"東京", "京に", "に住", "住む"}},
		{"korean", "안녕하세요 세계", []string{"안녕", "녕하", "하세", "세요", "세계"}},
		{"emoji", "I ❤️ pizza 🍕🍕 party🎉time", []string{"pizza", "party", "time"}},
		{"only emoji", "🎉🎉🎉", nil},
		{"mixed case", "GoLang GOLANG golang", []string{"golang", "golang", "golang"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Tokenize(c.text); !slices.Equal(got, c.want) {
				t.Errorf("Tokenize(%q) = %q, want %q", c.text, got, c.want)
			}
		})
	}
}

func TestStem(t *testing.T) {
	for w, want := range map[string]string{
		"cities": "city", "classes": "class", "boxes": "box", "matches": "match", "dogs": "dog",
		"bus": "bus", "class": "class", "analysis": "analysis", "news": "new",
		"running": "run", "played": "play", "stopped": "stop", "falling": "fall", "missed": "miss",
		"create": "creat", "creates": "creat", "created": "creat", "creating": "creat",
		"string": "string", "thing": "thing", "need": "need", "speed": "speed", "speeds": "speed",
		"red": "red", "bed": "bed", "ties": "tie", "uses": "use", "café": "café",
	} {
		if got := stem(w); got != want {
			t.Errorf("stem(%q) = %q, want %q", w, got, want)
		}
	}
}

// Whatever the input, Tokenize reads at most MaxTokenizeBytes and keeps words of at
// most MaxWordRunes runes.
func TestTokenizeBoundedWork(t *testing.T) {
	words := Tokenize(strings.Repeat("memory ", 2_000_000)) // 14 MB
	if max := MaxTokenizeBytes / len("memory "); len(words) > max+1 {
		t.Errorf("%d words from a capped input, want at most %d", len(words), max+1)
	}
	long := Tokenize(strings.Repeat("x", 10_000_000))
	if len(long) != 1 || utf8.RuneCountInString(long[0]) != MaxWordRunes {
		t.Errorf("a 10M-letter word gave %d words of %d runes", len(long), utf8.RuneCountInString(long[0]))
	}
	cjk := Tokenize(strings.Repeat("東京", 1_000_000))
	if max := MaxTokenizeBytes / 3; len(cjk) > max {
		t.Errorf("%d CJK bigrams from a capped input, want at most %d", len(cjk), max)
	}
	// Cutting in the middle of a multi-byte rune gives no broken token.
	for _, w := range Tokenize(strings.Repeat("é", MaxTokenizeBytes)) {
		if !utf8.ValidString(w) {
			t.Fatalf("invalid UTF-8 token %q", w)
		}
	}
}

func TestContentHash(t *testing.T) {
	// sha256("hello world")
	const helloWorld = "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
	for _, s := range []string{"hello world", "  Hello   World\n", "HELLO\tWORLD"} {
		if got := ContentHash(s); got != helloWorld {
			t.Errorf("ContentHash(%q) = %s, want %s", s, got, helloWorld)
		}
	}
	if ContentHash("caf\u00e9") != ContentHash("cafe\u0301") {
		t.Error("composed and decomposed é hash differently; want NFC to make them equal")
	}
	if ContentHash("hello world") == ContentHash("hello world!") {
		t.Error("different texts share a hash")
	}
	// Characters that show nothing do not make another text (pasted from a web page
	// or a chat, they would store a memory twice that reads the same), but a zero
	// width joiner, which changes how the text is drawn, does.
	for _, s := range []string{"hello\u200b world", "\ufeffhello world", "hel\u00adlo wor\u2060ld"} {
		if got := ContentHash(s); got != helloWorld {
			t.Errorf("ContentHash(%q) = %s, want that of %q", s, got, "hello world")
		}
	}
	if ContentHash("\U0001F469\u200d\U0001F4BB") == ContentHash("\U0001F469\U0001F4BB") {
		t.Error("a zero width joiner is dropped: it makes another emoji")
	}
	if got := Normalize(" Ça  VA\n"); got != "ça va" {
		t.Errorf("Normalize = %q, want %q", got, "ça va")
	}
}

// A memory written in halfwidth katakana (ｶﾞｲﾄﾞ) is found by a search in
// fullwidth katakana (ガイド), and the other way round: both are the same words.
// They shared no term, so neither found the other.
func TestHalfwidthKatakanaMeetsFullwidth(t *testing.T) {
	for half, full := range map[string]string{"ｶﾀｶﾅ": "カタカナ", "ｶﾞｲﾄﾞﾌﾞｯｸを読む": "ガイドブックを読む"} {
		if got, want := Tokenize(half), Tokenize(full); !slices.Equal(got, want) {
			t.Errorf("Tokenize(%q) = %q, want %q (as Tokenize(%q))", half, got, want, full)
		}
	}
	ix := NewKeywordIndex()
	ix.Put("full", "旅行のガイドブック")
	ix.Put("half", "ｺｰﾋｰの淹れ方")
	ix.Put("other", "東京の天気")
	for q, want := range map[string]string{"ｶﾞｲﾄﾞﾌﾞｯｸ": "full", "コーヒー": "half"} {
		if got := ix.Search(q, 1, nil); len(got) != 1 || got[0].ID != want {
			t.Errorf("Search(%q) = %v, want %s", q, got, want)
		}
	}
}
