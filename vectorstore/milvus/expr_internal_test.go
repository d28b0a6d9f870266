package milvus

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/vectorstore"
)

var hostileStrings = []string{
	``, `"`, `'`, `\`, `\"`, `"]`, `["`, `][`, `a"b`, `back\slash`, "new\nline", "cr\rlf",
	"nul\x00", `" or 1==1 or "`, `metadata["k"]`, "ünïcödé", "日本語", "🦀", "\u2028", "\x7f",
}

// term is one equality of a filter expression, as filterExpr writes it.
var term = regexp.MustCompile(`^metadata\["(k[0-9a-f]*)"\] == ("(?:[^"\\\n\r]|\\.)*")$`)

// Every hostile key and value becomes a hex path and a literal that the server's
// strconv.Unquote reads back exactly, with no raw quote, backslash or line break.
func TestFilterExprEscapes(t *testing.T) {
	for _, k := range hostileStrings {
		for _, v := range hostileStrings {
			expr := filterExpr(map[string]string{k: v})
			m := term.FindStringSubmatch(expr)
			if m == nil {
				t.Fatalf("key %q value %q: expression %q is not one plain term", k, v, expr)
			}
			if got, err := decodeKey(m[1]); err != nil || got != k {
				t.Errorf("key %q: path %q decodes to %q, %v", k, m[1], got, err)
			}
			if got, err := strconv.Unquote(m[2]); err != nil || got != v {
				t.Errorf("value %q: literal %s reads back as %q, %v", v, m[2], got, err)
			}
		}
	}
}

func TestFilterExprJoinsSortedTerms(t *testing.T) {
	got := filterExpr(map[string]string{"b": "2", "a": "1"})
	want := `metadata["k61"] == "1" and metadata["k62"] == "2"`
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if filterExpr(nil) != "" || filterExpr(map[string]string{}) != "" {
		t.Error("an empty filter must give no expression")
	}
}

func TestIDsExpr(t *testing.T) {
	got := idsExpr([]string{`a"b`, `c\`, "d"})
	want := `id in ["a\"b", "c\\", "d"]`
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	m := make(map[string]string)
	for i, s := range hostileStrings {
		m[s] = hostileStrings[len(hostileStrings)-1-i]
	}
	b, err := encodeMetadata(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeMetadata(b)
	if err != nil || !maps.Equal(got, m) {
		t.Errorf("round trip: %q, %v; want %q", got, err, m)
	}
	if got, err := decodeMetadata([]byte(`{}`)); got != nil || err != nil {
		t.Errorf("empty object: %v, %v", got, err)
	}
	if _, err := decodeMetadata([]byte(`{"nokprefix":"x"}`)); err == nil {
		t.Error("a key without the prefix decoded")
	}
}

func TestPrepareRejectsWhatMilvusCannotStore(t *testing.T) {
	v := []float32{1, 2}
	for name, it := range map[string]vectorstore.Item{
		"invalid UTF-8 ID":    {ID: "a\xff", Vector: v},
		"invalid UTF-8 text":  {ID: "a", Vector: v, Text: "\xff"},
		"invalid UTF-8 key":   {ID: "a", Vector: v, Metadata: map[string]string{"\xff": "x"}},
		"invalid UTF-8 value": {ID: "a", Vector: v, Metadata: map[string]string{"x": "\xff"}},
		"ID too long":         {ID: strings.Repeat("a", maxVarChar+1), Vector: v},
		"text too long":       {ID: "a", Vector: v, Text: strings.Repeat("a", maxVarChar+1)},
		"metadata too large":  {ID: "a", Vector: v, Metadata: map[string]string{"x": strings.Repeat("a", maxJSON)}},
		"dimension too large": {ID: "a", Vector: make([]float32, maxDim+1)},
	} {
		if name == "dimension too large" {
			it.Vector[0] = 1
		}
		if _, _, err := prepare([]vectorstore.Item{it}); !errors.Is(err, vectorstore.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	rows, dim, err := prepare([]vectorstore.Item{
		{ID: "a", Vector: []float32{1, 0}, Text: "first"},
		{ID: "b", Vector: []float32{0, 1}},
		{ID: "a", Vector: []float32{1, 1}, Text: "second"},
	})
	if err != nil || dim != 2 || len(rows) != 2 || rows[0].id != "a" || rows[0].text != "second" || rows[1].id != "b" {
		t.Errorf("duplicate IDs: %+v, %d, %v; want a (second), b", rows, dim, err)
	}
}

func TestPhysicalName(t *testing.T) {
	s := &Store{cfg: Config{Prefix: "p_"}.WithDefaults()}
	if got := s.physicalName("docs"); got != "p_docs" {
		t.Errorf("short name: %s", got)
	}
	a, b := s.physicalName(strings.Repeat("a", 255)), s.physicalName(strings.Repeat("a", 254)+"b")
	if len(a) != maxName || len(b) != maxName || a == b || !isIdentifier(a) {
		t.Errorf("long names: %q (%d), %q (%d): want distinct valid names of %d bytes", a, len(a), b, len(b), maxName)
	}
}

func TestConfigHidesPassword(t *testing.T) {
	c := Config{Username: "u", Password: "hunter2"}
	for _, s := range []string{c.String(), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), c.LogValue().String()} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("password printed: %s", s)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	for name, c := range map[string]Config{
		"URL address":      {Addr: "http://localhost:19530"},
		"no port":          {Addr: "localhost"},
		"bad DB":           {DB: "my-db"},
		"bad prefix":       {Prefix: "9x"},
		"long prefix":      {Prefix: strings.Repeat("p", maxPrefix+1)},
		"bad consistency":  {Consistency: "linearizable"},
		"negative timeout": {RequestTimeout: -time.Second},
		"password alone":   {Password: "secret"},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
