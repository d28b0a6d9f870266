package jsonesc

import "testing"

func TestHex4(t *testing.T) {
	for in, want := range map[string]rune{"0073": 's', "00e9x": 'é', "D83D": 0xd83d, "fFfF": 0xffff} {
		if r, ok := Hex4(in); !ok || r != want {
			t.Errorf("Hex4(%q) = %U %v, want %U", in, r, ok, want)
		}
		if r, ok := Hex4([]byte(in)); !ok || r != want {
			t.Errorf("Hex4([]byte(%q)) = %U %v, want %U", in, r, ok, want)
		}
	}
	for _, in := range []string{"", "007", "00g3", "-123"} {
		if _, ok := Hex4(in); ok {
			t.Errorf("Hex4(%q) took it", in)
		}
	}
}

func TestLoneSurrogateAt(t *testing.T) {
	for in, want := range map[string]int{
		`{"a":"x \ud800 y"}`:        8,
		`{"a":"\udc00"}`:            6,
		`{"a":"\ud800\u0041"}`:      6,
		`{"a":"\ud800\ud800"}`:      6,
		`{"a":"x\ud83d"}`:           7,
		`{"a":"\ud83d\ude00 ok"}`:   -1,
		`{"a":"\\ud800"}`:           -1,
		`{"a":"\u00e9\u0041"}`:      -1,
		`{"\ud800":1}`:              2,
		`["\ud83d\ude00","\uDFFF"]`: 17,
	} {
		if got := LoneSurrogateAt([]byte(in)); got != want {
			t.Errorf("LoneSurrogateAt(%s) = %d, want %d", in, got, want)
		}
	}
}
