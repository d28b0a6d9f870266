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
