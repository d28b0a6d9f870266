package node

import "testing"

// A boundedSet forgets the key added first once it holds more than its max; a key
// added again keeps its place, so it is not made younger.
func TestBoundedSetForgetsTheOldestAdded(t *testing.T) {
	s := newBoundedSet(3)
	for _, k := range []string{"a", "b", "c", "a", "d"} {
		s.add(k)
	}
	for k, want := range map[string]bool{"a": false, "b": true, "c": true, "d": true} {
		if got := s.has(k); got != want {
			t.Errorf("has(%q) = %v, want %v", k, got, want)
		}
	}
	s.add("e")
	if s.has("b") || !s.has("c") || !s.has("e") {
		t.Errorf("after e: b %v, c %v, e %v; want b forgotten next", s.has("b"), s.has("c"), s.has("e"))
	}
}
